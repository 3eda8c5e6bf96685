#!/usr/bin/env bash
# `call_tool` with a quota on against off, one gateway, rounds alternated (issue 23 item 2): the
# same setup as bench/gateway.sh (embedded default, fastecho downstream); in the "on" rounds a
# limit covers every call (per token, on the connector: requests per 60 s window, a daily
# budget and a concurrency limit, all too large to refuse), so each call passes all three
# budgets; "off" rounds have no limit. Prints calls/s and the gateway's CPU per call.
#
#   bash bench/quota_ab.sh [DURATION] [ROUNDS]    # defaults 6s, 3; needs wrk
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-6s} rounds=${2:-3}
source bench/lib.sh
start_gateway 18396 9404
for round in $(seq "$rounds"); do
  for mode in off on; do
    if [[ $mode == on ]]; then
      id=$("$bin" quota add --tenant bench --name bench --per token --connector fastecho \
        --requests 1000000000 --window-seconds 60 --daily 1000000000 --concurrency 100000)
    fi
    # One call so the replica reads the limits (or their absence) before the timed run.
    wrk_result "$gw" "$headers" 1 1s call_tool "$echo_call" hello >/dev/null
    for c in 1 8 32; do
      g0=$(ticks "$pid")
      line=$(wrk_result "$gw" "$headers" "$c" "$duration" call_tool "$echo_call" hello)
      g1=$(ticks "$pid")
      n=$(requests_in "$line")
      echo "round $round quota=$mode c=$c $line gateway_cpu_ms_per_call=$(ms_per_call $((g1 - g0)) "$n")"
    done
    if [[ $mode == on ]]; then
      "$bin" quota remove --tenant bench "$id" >/dev/null
    fi
  done
done
