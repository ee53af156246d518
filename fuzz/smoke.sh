#!/usr/bin/env bash
# CI smoke test for every fuzz target (agora-agh, agora-hyperspace, agora-agtp,
# agora-directory and agora-bridge; the 17 of
# `cargo fuzz list`, as README.md lists them): build them all, then run each one for
# ${FUZZ_SECONDS:-10} seconds starting from its committed seed corpus (empty when it has none),
# new inputs going to a scratch directory. Exits non-zero when the build fails, when a target
# finds a crash, panic, oracle violation, timeout or OOM, or when `cargo fuzz list` does not name
# exactly the files of fuzz_targets/ (common.rs, the shared helpers, aside).
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
# Every file in fuzz_targets/ but the shared helpers must be a target that runs here.
expected=$(ls fuzz_targets | grep -v '^common\.rs$' | sed 's/\.rs$//' | sort)
if [ "$(echo "$targets" | tr ' ' '\n' | sort)" != "$expected" ]; then
    echo "smoke: cargo fuzz list does not name every file of fuzz_targets/:" >&2
    diff <(echo "$targets" | tr ' ' '\n' | sort) <(echo "$expected") >&2 || true
    exit 1
fi
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
