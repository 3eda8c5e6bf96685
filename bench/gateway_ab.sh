#!/usr/bin/env bash
# Two gatehouse binaries alternated, in one sitting, through the same setup as
# bench/gateway.sh (fresh embedded default each time, fastecho downstream, call_tool): how the
# session-6 steps in docs/benchmarks.md were compared. Alternating keeps the machine's drift
# out of the difference.
#
#   bash bench/gateway_ab.sh BIN_A BIN_B [DURATION] [ROUNDS]    # defaults 5s, 2; needs wrk
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?BIN_A} b=${2:?BIN_B} duration=${3:-5s} rounds=${4:-2}
for round in $(seq "$rounds"); do
  for label in A B; do
    if [[ $label == A ]]; then bin_now=$a; else bin_now=$b; fi
    ( # a subshell per binary: start_gateway's exit trap stops it before the next one starts
      export GATEHOUSE_BIN=$bin_now
      source bench/lib.sh
      start_gateway 18395 9403
      for c in 1 8 32; do
        echo "round $round $label c=$c $(wrk_result "$gw" "$headers" "$c" "$duration" call_tool "$echo_call" hello)"
      done
    )
  done
done
