//! What the integration tests of this crate share: skipping a test whose outside requirement is
//! missing.

use std::io::Write as _;

/// Prints one `skipped: <test>: <why> (<how>)` line to the process's stderr, so the test can
/// return early and pass; with `AGORA_REQUIRE_EXTERNAL=1` (as `.ci/run` sets) it panics instead,
/// so CI never skips.
pub(crate) fn skip(why: &str, how: &str) {
    assert!(
        std::env::var("AGORA_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
        "{why} ({how}), and AGORA_REQUIRE_EXTERNAL=1 makes that a failure"
    );
    // The harness names the thread after the test; straight to stderr in one write, since the
    // harness would capture `eprintln!` of a passing test.
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!(
        "skipped: {test}: {why} ({how}); set AGORA_REQUIRE_EXTERNAL=1 to make this a failure\n"
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}
