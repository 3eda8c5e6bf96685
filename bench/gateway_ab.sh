#!/usr/bin/env bash
# Two gatehouse binaries alternated, in one sitting, through the same setup as
# bench/gateway.sh (fresh embedded default each time, fastecho downstream, call_tool), printing
# calls/s and the gateway's and PostgreSQL's CPU per call: how the session-6 steps in docs/benchmarks.md were
# compared. Alternating keeps the machine's drift out of the difference; give the same binary
# twice to see the noise between runs.
#
#   bash bench/gateway_ab.sh BIN_A BIN_B [DURATION] [ROUNDS]    # defaults 5s, 2; needs wrk
#   CONNECTIONS="32" bash bench/gateway_ab.sh …                   # other loads than 1, 8 and 32
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
      for c in ${CONNECTIONS:-1 8 32}; do
        g0=$(ticks "$pid"); p0=$(pg_ticks)
        line=$(wrk_result "$gw" "$headers" "$c" "$duration" call_tool "$echo_call" hello)
        g1=$(ticks "$pid"); p1=$(pg_ticks)
        n=$(requests_in "$line")
        echo "round $round $label c=$c $line gateway_cpu_ms_per_call=$(ms_per_call $((g1 - g0)) "$n") postgres_cpu_ms_per_call=$(ms_per_call $((p1 - p0)) "$n")"
      done
    )
  done
done
