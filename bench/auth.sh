#!/usr/bin/env bash
# Requests/s and latency of an authenticated no-op API call (service credential + bearer,
# GET /api/v1/tenants/{t}) next to unauthenticated GET /healthz, on the same server in the
# same run, with wrk. The server runs on the embedded default with RUST_LOG=warn (no
# per-request log line).
#
#   bash bench/auth.sh [DURATION]      # default 10s per figure; needs wrk (apt-get install wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
port=18392
source bench/lib.sh
GATEHOUSE_BIN=target/release/gatehouse start_serve "$port"
provision_machine
curl -sf "${auth[@]}" "http://127.0.0.1:$port/api/v1/tenants/bench" >/dev/null

row() { # row LABEL CONNECTIONS wrk-args…
  local label=$1 c=$2; shift 2
  local out
  out=$(wrk -t"$((c < 2 ? 1 : 2))" -c"$c" -d"$duration" --latency "$@")
  local rps p50 p99 non2xx
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "| $label | $c | $rps | $p50 | $p99 | ${non2xx:-0} |"
}
echo "| request | connections | requests/s | p50 | p99 | non-2xx |"
echo "|---|---|---|---|---|---|"
for c in 1 16; do
  row "GET /healthz" "$c" "http://127.0.0.1:$port/healthz"
  row "GET /api/v1/tenants/bench (authenticated)" "$c" "${auth[@]}" "http://127.0.0.1:$port/api/v1/tenants/bench"
done
