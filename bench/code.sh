#!/usr/bin/env bash
# execute_code through a running gateway, with the shared wrk driver (../shared/perf/wrk_mcp.sh):
# `async () => 42`, a program with one host call to the fast downstream, and call_tool of the
# same tool for comparison, at 1 and 2 connections (a replica runs 2 programs at once by default;
# the tenant's share is raised to both slots here, since one tenant drives the load).
#
#   bash bench/code.sh [DURATION]    # default 10s per figure; needs wrk
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
source bench/lib.sh
export GATEHOUSE_CODE_TENANT_RUNNING=2
start_gateway 18394 9402
answer='{"code":"async () => 42"}'
one_call='{"code":"async () => (await gatehouse.call(\"fastecho.echo\", { message: \"hello\" })).content[0].text"}'
run() { # run LABEL C TOOL ARGS EXPECT
  echo "$1 c=$2 $(wrk_result "$gw" "$headers" "$2" "$duration" "$3" "$4" "$5")"
}
for c in 1 2; do
  run "execute_code async()=>42" "$c" execute_code "$answer" result
  run "execute_code one host call" "$c" execute_code "$one_call" hello
  run "call_tool" "$c" call_tool "$echo_call" hello
done
