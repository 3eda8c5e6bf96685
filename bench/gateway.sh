#!/usr/bin/env bash
# call_tool through the gateway next to calling the same fast downstream directly, in one
# run, with the shared wrk driver (../shared/perf/wrk_mcp.sh); plus the gateway's RSS idle
# and under load.
#
#   bash bench/gateway.sh [DURATION]    # default 10s per figure; needs wrk
# Builds target/release/gatehouse and target/fastecho/release/fastecho when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
source bench/lib.sh
start_gateway 18393 9401
rss() { awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status"; }
# Epoch reads asked for by requests, and the statements that answered them (shared reads).
epoch_reads() {
  curl -sf "http://127.0.0.1:18393/metrics" | awk '/^gatehouse_epoch_reads_total\{kind="request"\}/ {r=$2} /^gatehouse_epoch_reads_total\{kind="statement"\}/ {s=$2} END {print r, s}'
}

echo "gateway RSS idle: $(rss) MiB"
peak=0
for c in 1 8 32; do
  echo "direct c=$c $(wrk_result http://127.0.0.1:9401/mcp '{}' "$c" "$duration" echo '{"message":"hello"}' hello)"
  ( while sleep 0.5; do rss; done ) > "$dir/rss.$c" &
  sampler=$!
  g0=$(ticks "$pid"); p0=$(pg_ticks); e0=$(epoch_reads)
  line="gateway c=$c $(wrk_result "$gw" "$headers" "$c" "$duration" call_tool "$echo_call" hello)"
  g1=$(ticks "$pid"); p1=$(pg_ticks); e1=$(epoch_reads)
  echo "  epoch reads (requests statements) before: $e0 after: $e1"
  n=$(requests_in "$line")
  echo "$line gateway_cpu_ms_per_call=$(ms_per_call $((g1 - g0)) "$n") postgres_cpu_ms_per_call=$(ms_per_call $((p1 - p0)) "$n")"
  kill $sampler 2>/dev/null || true
  p=$(sort -n "$dir/rss.$c" | tail -1)
  (( ${p:-0} > peak )) && peak=$p
done
echo "gateway RSS peak under load: $peak MiB"
