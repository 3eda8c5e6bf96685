#!/usr/bin/env bash
# Instructions per call_tool, counted by callgrind (repeatable on a noisy machine): the gateway
# runs under `valgrind --tool=callgrind --instr-atstart=no` (bench/lib.sh's start_gateway, so the
# same tenant, connector and fastecho); after the warm-up, instrumentation is switched on for
# DURATION of wrk at 2 connections, then the profile is dumped and the total divided by the calls.
#
#   bash bench/callgrind.sh BIN [DURATION] [OUT]     # defaults 20s, /tmp/gatehouse.callgrind
#   VALGRIND_ARGS=--separate-callers=3 ...  # more of the call graph
# Prints the instructions per call and callgrind_annotate's inclusive top entries.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_path=$(realpath "${1:?BIN}") duration=${2:-20s} out=${3:-/tmp/gatehouse.callgrind}
source bench/lib.sh
rm -f "$out"
# shellcheck disable=SC2086 # VALGRIND_ARGS is a list of options
GATEHOUSE_BIN=$bin_path start_gateway 18601 9601 valgrind --tool=callgrind --instr-atstart=no ${VALGRIND_ARGS:-} --callgrind-out-file="$out"
callgrind_control -i on "$pid" >/dev/null
r=$(wrk_result "$gw" "$headers" 2 "$duration" call_tool "$echo_call" hello)
callgrind_control -i off "$pid" >/dev/null
callgrind_control -d "$pid" >/dev/null
sleep 1
n=$(requests_in "$r")
file=$(ls -t "$out"* | head -1)
total=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "calls=$n instructions=$total per_call=$((total / n))"
callgrind_annotate --inclusive=yes "$file" 2>/dev/null | sed -n '/file:function/,$p' | sed -n 1,60p
