//! The TypeScript SDK (`sdk/typescript`) against this build's node: `tsc --noEmit` (strict),
//! the build, its `node --test` suites (every namespace, errors, providers, reconnection, the AGH
//! client, and the spec's Examples 1–3 and the §6.4 channel run as programs), and the package
//! made with `npm pack`. Needs Node.js ≥ 20 and `npm ci` in `sdk/typescript`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support;

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk/typescript")
}

/// Runs `program args…` in `sdk/typescript` with the node binary; asserts it succeeds and
/// returns its output.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(sdk_dir())
        .env("AGORA_BIN", env!("CARGO_BIN_EXE_agora"))
        .env("AGORA_REQUIRE_EXTERNAL", "1")
        .env_remove("AGORA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("the program runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

#[test]
fn the_typescript_sdk_type_checks_builds_passes_its_tests_and_packs() {
    let present = support::on_path("node")
        && support::on_path("npm")
        && sdk_dir().join("node_modules/typescript").is_dir();
    if !support::external(
        "node, npm and sdk/typescript/node_modules",
        present,
        "Node.js >= 20, then: cd sdk/typescript && npm ci",
    ) {
        return;
    }
    run("npm", &["run", "--silent", "typecheck"]);
    run("npm", &["run", "--silent", "build"]);
    let said = run("npm", &["test", "--silent"]);
    assert!(said.contains("# fail 0"), "{said}");
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    run(
        "npm",
        &["pack", "--ignore-scripts", "--pack-destination", dir],
    );
    let packed: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        packed
            .iter()
            .any(|f| f.starts_with("agora-mesh-") && f.ends_with(".tgz")),
        "{packed:?}"
    );
}
