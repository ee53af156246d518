//! `agora hyperspace sign|verify` against the vector files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/hyperspace")
}

fn agora(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command may exit (usage error) before reading its input: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

#[test]
fn sign_reproduces_the_golden_envelopes_exactly() {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(vectors().join("golden.json")).unwrap())
            .unwrap();
    let mut n = 0;
    for c in cases.iter().filter(|c| c.get("sig").is_some()) {
        let ts = c["ts"].to_string();
        let out = agora(
            &[
                "hyperspace",
                "sign",
                "--key",
                c["key"].as_str().unwrap(),
                "--topic",
                c["topic"].as_str().unwrap(),
                "--ts",
                &ts,
                "--nonce",
                c["nonce"].as_str().unwrap(),
            ],
            &format!("{}\n", c["d_json"].as_str().unwrap()),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{}\n", c["envelope"].as_str().unwrap()),
            "{}",
            c["name"]
        );
        n += 1;
    }
    assert!(n >= 5);
}

#[test]
fn verify_reports_one_verdict_per_line() {
    let text = std::fs::read_to_string(vectors().join("envelope-v2.ndjson")).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let env = first["envelope"].as_str().unwrap();
    let topic = first["topic"].as_str().unwrap();
    let now = first["ts"].to_string();
    let tampered = env.replace("web-search", "web-searcH");
    let input = format!("{env}\n{env}\n{tampered}\nnot json\n");
    let out = agora(
        &["hyperspace", "verify", "--topic", topic, "--now", &now],
        &input,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"ok\":true}\n{\"ok\":false,\"error\":\"replayed\"}\n{\"ok\":false,\"error\":\"bad_signature\"}\n{\"ok\":false,\"error\":\"malformed\"}\n"
    );
    let out = agora(
        &["hyperspace", "verify", "--topic", topic, "--now", &now],
        &format!("{env}\n"),
    );
    assert_eq!(out.status.code(), Some(0));
    let out = agora(
        &["hyperspace", "sign", "--key", "zz", "--topic", topic],
        "{}\n",
    );
    assert_eq!(out.status.code(), Some(2));
}
