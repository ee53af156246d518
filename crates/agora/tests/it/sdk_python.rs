//! The Python SDK (`sdk/python`) against this build's node: its pytest suite (every namespace,
//! errors, providers, reconnection, the AGH client, the x402 helper, and the spec's Examples
//! 1–3 and the §6.4 channel run as programs), `mypy --strict`, and the package built with
//! `python -m build`. The Python is `AGORA_SDK_PYTHON` (a venv with
//! `sdk/python/requirements-dev.txt`), else `python3` when it has them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support;

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python")
}

/// The Python with the SDK's development tools, or `None` after the skip line.
fn sdk_python() -> Option<String> {
    let candidate = std::env::var("AGORA_SDK_PYTHON").unwrap_or_else(|_| "python3".into());
    let present = Command::new(&candidate)
        .args(["-c", "import websockets, pytest, mypy, build, eth_account"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    support::external(
        "a Python with the SDK's development tools",
        present,
        "python3 -m venv v && v/bin/pip install -r sdk/python/requirements-dev.txt, then AGORA_SDK_PYTHON=v/bin/python",
    )
    .then_some(candidate)
}

/// Runs `python args…` in `sdk/python` with the node binary and the SDK's sources; asserts it
/// succeeds and returns its output.
fn run(python: &str, args: &[&str]) -> String {
    let out = Command::new(python)
        .args(args)
        .current_dir(sdk_dir())
        .env("AGORA_BIN", env!("CARGO_BIN_EXE_agora"))
        .env("AGORA_REQUIRE_EXTERNAL", "1")
        .env("PYTHONPATH", "src")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("AGORA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "python {args:?} failed:\n{text}");
    text
}

#[test]
fn the_python_sdk_passes_its_tests_and_runs_the_spec_examples_against_real_nodes() {
    let Some(python) = sdk_python() else { return };
    let said = run(&python, &["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    assert!(said.contains(" passed"), "{said}");
    assert!(!said.contains(" failed"), "{said}");
}

#[test]
fn the_python_sdk_is_typed_strictly() {
    let Some(python) = sdk_python() else { return };
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().to_str().unwrap();
    run(&python, &["-m", "mypy", "--cache-dir", cache]);
}

#[test]
fn the_python_sdk_builds_its_wheel_and_sdist() {
    let Some(python) = sdk_python() else { return };
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    run(&python, &["-m", "build", "--no-isolation", "--outdir", dir]);
    let built: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(built.iter().any(|f| f.ends_with(".whl")), "{built:?}");
    assert!(built.iter().any(|f| f.ends_with(".tar.gz")), "{built:?}");
}
