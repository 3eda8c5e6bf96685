#!/usr/bin/env bash
# One gateway's RSS idle and after load, with its calls/s and CPU per call: start_gateway
# (embedded default, fastecho behind it), 2 s idle, then call_tool at 32 connections; then
# once more after one request to each of a dozen other routes (the console, the OpenAPI
# document, listings, /metrics), whose code the release link does not lay out with the hot
# path (docs/decisions.md, "Code the gateway runs, laid out together").
#
#   bash bench/rss.sh BIN LABEL [DURATION]     # environment is passed through to serve
# Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
label=${2:?LABEL} duration=${3:-6s}
source bench/lib.sh
GATEHOUSE_BIN=${1:?BIN} start_gateway 18501 9501
sleep 2
rss() { awk -v f="${1:-VmRSS}" '$1 == f":" {print int($2/1024)}' "/proc/$pid/status"; }
# Idle RSS split: anonymous memory (the heap) and file pages (the binary's code, mapped).
idle=$(rss) idle_anon=$(rss RssAnon) idle_file=$(rss RssFile)
t0=$(ticks "$pid")
r=$(wrk_result "$gw" "$headers" 32 "$duration" call_tool "$echo_call" hello)
t1=$(ticks "$pid")
n=$(requests_in "$r")
loaded=$(rss)
base="http://127.0.0.1:18501"
for path in /api/v1/openapi.json /console /console/login /metrics /readyz /api/v1/tenants/bench \
  /api/v1/tenants/bench/workspaces /api/v1/tenants/bench/tokens /api/v1/tenants/bench/workspaces/main/connectors \
  /api/v1/tenants/bench/activity /.well-known/oauth-authorization-server /api/v1/tenants/bench/audit; do
  curl -s -o /dev/null "${auth[@]}" "$base$path"
done
sleep 1
echo "$label idle=${idle}MiB (anon ${idle_anon}, file ${idle_file}) after_load=${loaded}MiB $(grep -o 'rps=[0-9.]*' <<<"$r") cpu_ms_per_call=$(ms_per_call $((t1 - t0)) "$n") after_routes=$(rss)MiB (anon $(rss RssAnon), file $(rss RssFile))"
