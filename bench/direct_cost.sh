#!/usr/bin/env bash
# CPU per call of the fast downstream (fastecho) and of the wrk driver when fastecho is
# called directly: what is left of the two cores for a gateway in between.
#
#   bash bench/direct_cost.sh [DURATION]    # default 5s per figure; needs wrk and /usr/bin/time
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
source bench/lib.sh
start_fastecho 9411
for c in 8 32; do
  f0=$(ticks "$echo_pid")
  out=$({ /usr/bin/time -f "WRKCPU %U %S" bash "$shared/perf/wrk_mcp.sh" http://127.0.0.1:9411/mcp '{}' "$c" "$duration" echo '{"message":"hello"}' hello | grep WRK_RESULT; } 2>&1)
  f1=$(ticks "$echo_pid")
  n=$(requests_in "$out")
  w=$(awk '/WRKCPU/ {print $2 + $3}' <<<"$out")
  echo "c=$c $(grep WRK_RESULT <<<"$out") fastecho_cpu_ms_per_call=$(ms_per_call $((f1 - f0)) "$n") wrk_cpu_ms_per_call=$(awk -v w="$w" -v n="$n" 'BEGIN {printf "%.3f", w * 1000 / n}')"
done
