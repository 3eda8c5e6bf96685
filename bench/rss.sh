#!/usr/bin/env bash
# One gateway's RSS idle and after load, with its calls/s and CPU per call: start_gateway
# (embedded default, fastecho behind it), 2 s idle, then call_tool at 32 connections.
#
#   bash bench/rss.sh BIN LABEL [DURATION]     # environment is passed through to serve
# Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
label=${2:?LABEL} duration=${3:-6s}
source bench/lib.sh
GATEHOUSE_BIN=${1:?BIN} start_gateway 18501 9501
sleep 2
rss() { awk '/VmRSS/ {print int($2/1024)}' "/proc/$pid/status"; }
idle=$(rss)
t0=$(ticks "$pid")
r=$(wrk_result "$gw" "$headers" 32 "$duration" call_tool "$echo_call" hello)
t1=$(ticks "$pid")
n=$(requests_in "$r")
echo "$label idle=${idle}MiB after_load=$(rss)MiB $(grep -o 'rps=[0-9.]*' <<<"$r") cpu_ms_per_call=$(ms_per_call $((t1 - t0)) "$n")"
