//! The `agora agh` command-line contract: verdict lines, exit codes, stdin handling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const NOW: &str = "1775822400";

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/agh")
}

fn agora(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    // The command may exit (usage error) before reading its input: a broken pipe is fine.
    let _ = pipe.write_all(stdin.unwrap_or_default());
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn verdicts(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn validate_valid_vectors_exits_zero_with_one_verdict_per_line() {
    let file = vectors().join("envelopes-valid.ndjson");
    let out = agora(
        &["agh", "validate", "--now", NOW, file.to_str().unwrap()],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // over a file, progress is drawn only on a terminal: a piped stderr stays empty
    assert!(out.stderr.is_empty(), "{:?}", out.stderr);
    let v = verdicts(&out);
    assert_eq!(v.len(), 7);
    assert_eq!(
        v[0],
        serde_json::json!({"line":1,"ok":true,"id":"msg_greet_01","kind":"greet"})
    );
    // Exact bytes and key order of a verdict line.
    let first = String::from_utf8(out.stdout).unwrap();
    assert!(
        first.starts_with("{\"line\":1,\"ok\":true,\"id\":\"msg_greet_01\",\"kind\":\"greet\"}\n")
    );
}

#[test]
fn validate_invalid_vectors_exits_one_with_reasons() {
    let input = std::fs::read(vectors().join("envelopes-invalid.ndjson")).unwrap();
    let expected =
        std::fs::read_to_string(vectors().join("envelopes-invalid.expected.ndjson")).unwrap();
    let out = agora(&["agh", "validate", "--now", NOW, "-"], Some(&input));
    assert_eq!(out.status.code(), Some(1));
    let v = verdicts(&out);
    for (i, (got, want)) in v.iter().zip(expected.lines()).enumerate() {
        let want: Value = serde_json::from_str(want).unwrap();
        assert_eq!(got["line"], i + 1);
        assert_eq!(got["ok"], false);
        assert_eq!(got["reason"], want["reason"]);
        assert!(got["detail"].as_str().is_some_and(|d| !d.is_empty()));
        let keys: Vec<&String> = got.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 4);
    }
}

#[test]
fn validate_reads_stdin_by_default_dedups_across_lines_and_handles_crlf() {
    let line = std::fs::read_to_string(vectors().join("envelopes-valid.ndjson")).unwrap();
    let say = line.lines().nth(2).unwrap();
    let input = format!("{say}\r\n{say}\n\nnot json");
    let out = agora(&["agh", "validate", "--now", NOW], Some(input.as_bytes()));
    assert_eq!(out.status.code(), Some(1));
    let v = verdicts(&out);
    assert_eq!(v.len(), 4);
    assert_eq!(v[0]["ok"], true);
    assert_eq!(v[1]["reason"], "duplicate");
    assert_eq!(v[2]["reason"], "malformed");
    assert_eq!(v[3]["reason"], "malformed");
    assert_eq!(v[3]["line"], 4);
}

#[test]
fn validate_replay_age_flag_changes_freshness() {
    let line = std::fs::read_to_string(vectors().join("envelopes-valid.ndjson")).unwrap();
    let say = line.lines().nth(2).unwrap();
    let later = "1775823000"; // 600 s after ts
    let out = agora(&["agh", "validate", "--now", later], Some(say.as_bytes()));
    assert_eq!(verdicts(&out)[0]["reason"], "expired");
    let out = agora(
        &["agh", "validate", "--now", later, "--replay-age", "900"],
        Some(say.as_bytes()),
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn usage_and_io_errors_exit_two() {
    for args in [
        &["agh", "validate", "--bogus"][..],
        &["agh", "validate", "--now", "soon"],
        &["agh", "validate", "--replay-age", "0"],
        &["agh", "validate", "/definitely/not/here.ndjson"],
        &["agh", "nope"],
    ] {
        let out = agora(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn digest_prints_one_digest_per_line() {
    let lines = std::fs::read_to_string(vectors().join("capability-digests.ndjson")).unwrap();
    let mut input = String::new();
    let mut want = String::new();
    for l in lines.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        input.push_str(&v["document"].to_string());
        input.push('\n');
        want.push_str(v["digest"].as_str().unwrap());
        want.push('\n');
    }
    let out = agora(&["agh", "digest"], Some(input.as_bytes()));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), want);

    let out = agora(
        &["agh", "digest", "-"],
        Some(b"{\"id\":\"a\"}\n{\"id\":\"a\",\"summary\":\"s\",\"outcome\":\"o\"}\n"),
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], "", "a bad line keeps its place as an empty line");
    assert!(rows[1].starts_with("sha256:"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

#[test]
fn route_token_prints_the_token() {
    let out = agora(&["agh", "route-token", "reviewer.sess-xyz"], None);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"790dd5515558f7784877abcbca51c5ba\n");
    let out = agora(&["agh", "route-token", "BadPeer"], None);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn reference_admission_flag_applies_the_runtime_rules() {
    let line = std::fs::read_to_string(vectors().join("envelopes-valid.ndjson")).unwrap();
    let say = line.lines().nth(2).unwrap().replace(
        "I can take the failing migration tests.",
        "password: hunter2",
    );
    let out = agora(&["agh", "validate", "--now", NOW], Some(say.as_bytes()));
    assert_eq!(out.status.code(), Some(0), "off by default");
    let out = agora(
        &["agh", "validate", "--now", NOW, "--reference-admission"],
        Some(say.as_bytes()),
    );
    assert_eq!(out.status.code(), Some(1));
    let v = verdicts(&out);
    assert_eq!(v[0]["reason"], "malformed");
    assert!(v[0]["detail"].as_str().unwrap().contains("secret"));
}
