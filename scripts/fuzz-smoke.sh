#!/usr/bin/env bash
# Smoke run of every fuzz target (issue 25 §3): builds them all once, then runs each for a
# few seconds on its committed corpus (fuzz/corpus/TARGET/) and the inputs of past findings
# (fuzz/regressions/TARGET/), both read only: what a run finds new goes to a throwaway
# directory. Fails on the first crash, panic, timeout or leak; libFuzzer
# writes the input that did it to fuzz/artifacts/TARGET/.
#
#   bash scripts/fuzz-smoke.sh            # every target, FUZZ_SECONDS (default 15) each
#   bash scripts/fuzz-smoke.sh sse_framing direct_call
#
# cargo-fuzz runs on the stable toolchain with `--sanitizer none` (the AddressSanitizer
# default needs nightly). libFuzzer's default is one process with one thread, so it shares a
# small machine (`-jobs=1 -workers=1` would fork one child that logs to fuzz-0.log instead).
# `--dev`: an unoptimised build takes a fraction of the release build's time (the whole
# gatehouse library is instrumented), and a smoke run needs coverage, not speed; long runs
# use the default release build (see the README's "Fuzzing").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

CARGO_FUZZ_VERSION=0.13.2
seconds=${FUZZ_SECONDS:-15}

if [[ $(cargo fuzz --version 2>/dev/null) != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cargo fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
cargo fuzz build --dev --sanitizer none

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
  echo "== $target (${seconds}s)"
  mkdir -p "$scratch/$target" "corpus/$target"
  # New inputs land in the scratch directory (first); the committed corpus and the inputs of
  # past findings (fuzz/regressions/TARGET/) are only read.
  dirs=("$scratch/$target" "corpus/$target")
  [[ -d regressions/$target ]] && dirs+=("regressions/$target")
  if ! cargo fuzz run --dev --sanitizer none "$target" "${dirs[@]}" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$scratch/$target.log" 2>&1; then
    tail -n 60 "$scratch/$target.log"
    echo "fuzz target $target failed (input in fuzz/artifacts/$target/)" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^Done' "$scratch/$target.log" | tr '\n' ' ' || true
  echo
done
echo "== all ${#targets[@]} fuzz targets ran clean"
