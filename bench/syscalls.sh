#!/usr/bin/env bash
# The memory system calls (mmap, munmap, madvise) a gateway makes under call_tool load, counted
# by strace: how often the allocator maps and unmaps (docs/decisions.md, "The allocator").
# start_gateway (embedded default, fastecho behind it), 2 s warm-up, then DURATION of wrk at 8
# connections with strace -c attached to every thread.
#
#   bash bench/syscalls.sh BIN [DURATION]     # default 5s; environment is passed through to serve
# Needs wrk and strace (apt-get install wrk strace).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${2:-5s}
source bench/lib.sh
GATEHOUSE_BIN=${1:?BIN} start_gateway 18513 9513
wrk_result "$gw" "$headers" 8 2s call_tool "$echo_call" hello >/dev/null
out=$(mktemp)
strace -f -c -e trace=mmap,munmap,madvise -p "$pid" -o "$out" & tracer=$!
sleep 0.5
wrk_result "$gw" "$headers" 8 "$duration" call_tool "$echo_call" hello
kill -INT $tracer; wait $tracer 2>/dev/null || true
cat "$out"; rm -f "$out"
