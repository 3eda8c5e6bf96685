#!/usr/bin/env bash
# call_tool through Gatehouse next to the same fast downstream (fastecho) called directly and
# through nginx (the cheapest L7 proxy: one worker, keep-alive upstream, no buffering), and next
# to another Gatehouse binary, in one sitting with the rounds alternated: the issue 20 table.
# Prints one line per path, round and concurrency with calls/s, p50 and the proxy's CPU per call.
#
#   bash bench/side_by_side.sh NEW_BIN OLD_BIN [DURATION] [ROUNDS]   # defaults 5s, 2
# Needs wrk and nginx (apt-get install wrk nginx-light).
set -euo pipefail
cd "$(dirname "$0")/.."
new=${1:?NEW_BIN} old=${2:?OLD_BIN} duration=${3:-5s} rounds=${4:-2}
source bench/lib.sh
start_fastecho 9401
start_nginx 9401 9410
trap 'kill $echo_pid 2>/dev/null; stop_nginx' EXIT
# p50 from wrk's latency distribution (the driver prints it before WRK_RESULT).
measure() { # measure LABEL URL HEADERS C TOOL ARGS [PID]
  local out p50 n t0 t1 cpu=""
  [[ -n ${7:-} ]] && t0=$(ticks "$7")
  out=$(bash "$shared/perf/wrk_mcp.sh" "$2" "$3" "$4" "$duration" "$5" "$6" hello)
  if [[ -n ${7:-} ]]; then
    t1=$(ticks "$7")
    n=$(requests_in "$(grep WRK_RESULT <<<"$out")")
    cpu=" proxy_cpu_ms_per_call=$(ms_per_call $((t1 - t0)) "$n")"
  fi
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  echo "round $round $1 c=$4 p50=$p50 $(grep WRK_RESULT <<<"$out")$cpu"
}
for round in $(seq "$rounds"); do
  for c in 1 8 32; do
    measure direct http://127.0.0.1:9401/mcp '{}' "$c" echo '{"message":"hello"}'
    measure nginx http://127.0.0.1:9410/mcp '{}' "$c" echo '{"message":"hello"}' "$ngx_worker"
  done
  for label in new old; do
    if [[ $label == new ]]; then bin_now=$new; else bin_now=$old; fi
    ( # a subshell per binary: start_gateway's exit trap stops it before the next one starts
      export GATEHOUSE_BIN=$bin_now
      start_gateway 18395 9402   # its own fastecho (same binary): start_gateway starts one
      for c in 1 8 32; do
        measure "gatehouse-$label" "$gw" "$headers" "$c" call_tool "$echo_call" "$pid"
      done
      echo "round $round gatehouse-$label rss_after_load_mib=$(awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status")"
    )
  done
done
