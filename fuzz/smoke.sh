#!/usr/bin/env bash
# CI smoke test for the agora-agh fuzz targets: build every target, then run each one for
# ${FUZZ_SECONDS:-10} seconds starting from its committed seed corpus. Exits non-zero when the
# build fails or any target finds a crash, panic, oracle violation, timeout or OOM.
set -euo pipefail

cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1   # cargo-fuzz needs -Z flags (sanitizers); stable toolchain only.
seconds="${FUZZ_SECONDS:-10}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "smoke: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --version '~0.13' --locked
fi

echo "smoke: building all fuzz targets" >&2
cargo fuzz build -O

targets=$(cargo fuzz list)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0
for t in $targets; do
    echo "smoke: running $t for ${seconds}s" >&2
    # New inputs go to a scratch directory (first corpus argument); the committed seeds are only read.
    # A target whose seeds are not committed starts from an empty corpus (libFuzzer refuses a
    # corpus directory that does not exist).
    mkdir -p "$work/$t" "corpus/$t"
    if ! cargo fuzz run -O "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
        echo "smoke: FAILED: $t (reproducer under fuzz/artifacts/$t/)" >&2
        status=1
    fi
done
exit "$status"
