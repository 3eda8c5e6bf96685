#!/usr/bin/env bash
# call_tool through Gatehouse next to calling the Node reference server (the npm package
# @modelcontextprotocol/server-everything, streamable HTTP, tool `echo`) directly, in one run
# with the rounds alternated: issue 20's "against the Node reference server" row. The reference
# server is single-threaded Node, so it is the ceiling here; the figure is the share of its
# direct calls/s that survives the gateway in between. nginx in front of the same server (the
# cheapest proxy: nginx.conf as in side_by_side.sh) is measured in the same rounds, as what
# any proxy on these cores can keep.
#
#   bash bench/everything.sh [DURATION] [ROUNDS] [CONNECTIONS...]   # defaults 8s, 3, "1 8"
# Needs wrk and the test peers (bash scripts/test.sh installs them into tests/peers).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-8s} rounds=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
conns=("$@")
(( ${#conns[@]} )) || conns=(1 8)
script=tests/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[[ -f $script ]] || { echo "server-everything is not installed: run bash scripts/test.sh once" >&2; exit 1; }
source bench/lib.sh
start_gateway 18398 9408
ev_port=9409
(cd tests/peers && PORT=$ev_port exec node "$OLDPWD/$script" streamableHttp >/dev/null 2>&1) &
ev_pid=$!
trap 'kill $ev_pid $echo_pid 2>/dev/null; stop_nginx; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
until curl -s -o /dev/null "http://127.0.0.1:$ev_port/mcp"; do sleep 0.1; done
ngx_port=9411
start_nginx "$ev_port" "$ngx_port"
"$bin" connector add --tenant bench --workspace main --id everything --kind remote_mcp \
  --url "http://127.0.0.1:$ev_port/mcp" >/dev/null
call='{"address":"everything.echo","args":{"message":"hello"}}'
# Warm both paths (the gateway's session and catalog, Node's JIT).
wrk_result "$gw" "$headers" 1 2s call_tool "$call" hello >/dev/null
wrk_result "http://127.0.0.1:$ev_port/mcp" '{}' 1 2s echo '{"message":"hello"}' hello >/dev/null
# The WRK_RESULT line of one path, with the CPU per call of the process in between:
# through PID KEY URL HEADERS C TOOL ARGS.
through() {
  local t0 t1 line n
  t0=$(ticks "$1")
  line=$(wrk_result "$3" "$4" "$5" "$duration" "$6" "$7" hello)
  t1=$(ticks "$1")
  n=$(requests_in "$line")
  echo "$line $2=$(ms_per_call $((t1 - t0)) "$n")"
}
for round in $(seq "$rounds"); do
  for c in "${conns[@]}"; do
    echo "round $round direct c=$c $(wrk_result "http://127.0.0.1:$ev_port/mcp" '{}' "$c" "$duration" echo '{"message":"hello"}' hello)"
    echo "round $round nginx c=$c $(through "$ngx_worker" proxy_cpu_ms_per_call "http://127.0.0.1:$ngx_port/mcp" '{}' "$c" echo '{"message":"hello"}')"
    echo "round $round gateway c=$c $(through "$pid" gateway_cpu_ms_per_call "$gw" "$headers" "$c" call_tool "$call")"
  done
done
