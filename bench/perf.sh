#!/usr/bin/env bash
# Where the gateway's CPU goes natively during call_tool (the counterpart of bench/callgrind.sh,
# which counts instructions under valgrind and so runs SHA-256 without SHA-NI): start_gateway,
# then `perf record -g` on the gateway for the middle of DURATION of wrk at CONNECTIONS.
#
#   bash bench/perf.sh BIN [DURATION] [CONNECTIONS] [OUT]   # defaults 8s, 32, /tmp/gatehouse.perf
# Prints the wrk result and perf's exclusive top entries; OUT stays for `perf report -i OUT`.
# Needs perf (apt-get install linux-perf) and wrk.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_path=$(realpath "${1:?BIN}") duration=${2:-8s} connections=${3:-32} out=${4:-/tmp/gatehouse.perf}
source bench/lib.sh
GATEHOUSE_BIN=$bin_path start_gateway 18801 9801
# Recorded for DURATION minus 2 s, from 1 s in: the ramp-up and the tail are left out.
record=$((${duration%s} - 2))
(sleep 1 && perf record -F 1999 -g -p "$pid" -o "$out" -- sleep "$record" >/dev/null 2>&1) &
recorder=$!
wrk_result "$gw" "$headers" "$connections" "$duration" call_tool "$echo_call" hello
wait "$recorder"
perf report -i "$out" --no-children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -40
