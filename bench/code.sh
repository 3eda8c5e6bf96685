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
shared=$(cd ../shared && pwd)
target=${CARGO_TARGET_DIR:-target}
bin=$target/release/gatehouse
echo_bin=$target/fastecho/release/fastecho
[[ -x $bin ]] || cargo build --release --locked --bin gatehouse
[[ -x $echo_bin ]] || cargo build --release --manifest-path "$shared/perf/fastecho/Cargo.toml" --target-dir "$target/fastecho"
port=18394
dir=$(mktemp -d /tmp/gatehouse-codebench-XXXXXX)
chmod 755 "$dir" # the embedded cluster runs as an unprivileged user when we are root
"$echo_bin" 127.0.0.1:9402 2>/dev/null &
echo_pid=$!
export GATEHOUSE_DATA_DIR=$dir GATEHOUSE_LISTEN=127.0.0.1:$port RUST_LOG=warn GATEHOUSE_CODE_TENANT_RUNNING=2
"$bin" serve 2>/dev/null &
pid=$!
trap 'kill $echo_pid 2>/dev/null; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do
  kill -0 "$pid" 2>/dev/null || { echo "gatehouse serve exited" >&2; exit 1; }
  sleep 0.05
done
"$bin" tenant create bench --name Bench >/dev/null
"$bin" workspace create --tenant bench main >/dev/null
"$bin" connector add --tenant bench --workspace main --id fastecho --kind remote_mcp --url http://127.0.0.1:9402/mcp >/dev/null
mapfile -t sc < <("$bin" service-credential create --tenant bench --name bench)
mapfile -t tok < <("$bin" token create --tenant bench --name bench)
headers=$(printf '{"Gatehouse-Client-Id":"%s","Gatehouse-Client-Secret":"%s","Authorization":"Bearer %s"}' "${sc[1]}" "${sc[2]}" "${tok[1]}")
gw="http://127.0.0.1:$port/t/bench/w/main/mcp"
answer='{"code":"async () => 42"}'
one_call='{"code":"async () => (await gatehouse.call(\"fastecho.echo\", { message: \"hello\" })).content[0].text"}'
direct='{"address":"fastecho.echo","args":{"message":"hello"}}'
run() { # run LABEL C TOOL ARGS EXPECT
  local out
  out=$(bash "$shared/perf/wrk_mcp.sh" "$gw" "$headers" "$2" "$duration" "$3" "$4" "$5" | grep WRK_RESULT)
  echo "$1 c=$2 $out"
}
# Warm up the downstream session and catalog.
bash "$shared/perf/wrk_mcp.sh" "$gw" "$headers" 1 2s call_tool "$direct" hello >/dev/null
for c in 1 2; do
  run "execute_code async()=>42" "$c" execute_code "$answer" result
  run "execute_code one host call" "$c" execute_code "$one_call" hello
  run "call_tool" "$c" call_tool "$direct" hello
done
