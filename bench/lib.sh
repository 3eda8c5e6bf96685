# Shared by the gateway benchmarks (sourced from the repository's root, not run): builds what
# is missing, starts the fast downstream (fastecho) and `gatehouse serve` on the embedded
# default, provisions tenant `bench` / workspace `main` / connector `fastecho` and machine
# credentials, and cleans everything up on exit.
#
#   start_fastecho ECHO_PORT          # sets echo_pid
#   start_gateway PORT ECHO_PORT [PREFIX...]
#                                     # also sets dir, pid, headers, gw; extra environment for
#                                     # serve: export it before. GATEHOUSE_BIN picks the binary
#                                     # (default target/release/gatehouse, built when missing);
#                                     # serve runs under PREFIX (valgrind, say) if given.
#   start_serve PORT [PREFIX...]      # serve alone, run under PREFIX (valgrind, say) if given;
#                                     # sets bin, dir, pid
#   provision_machine                 # tenant bench and a machine pair: sets sc, tok, and auth
#                                     # (the pair as curl's and wrk's -H arguments)
# The fastecho and wrk driver live in ../shared (only the gateway benchmarks need them).
shared=$(cd ../shared 2>/dev/null && pwd || true)
# The call the gateway benchmarks make: fastecho's echo, through call_tool.
echo_call='{"address":"fastecho.echo","args":{"message":"hello"}}'

# The shared wrk driver's WRK_RESULT line: wrk_result URL HEADERS_JSON C DURATION TOOL ARGS EXPECT.
wrk_result() { bash "$shared/perf/wrk_mcp.sh" "$@" | grep WRK_RESULT; }
# The number of requests in a WRK_RESULT line (the first one, if several): requests_in TEXT.
requests_in() { sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$1" | head -1; }
# CPU ticks (utime + stime) of process PID so far.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# CPU ticks of every postgres process so far.
pg_ticks() { local t=0 p; for p in $(pgrep -x postgres); do t=$((t + $(ticks "$p" 2>/dev/null || echo 0))); done; echo $t; }
# After start_serve (or start_gateway): psql and pgbench reach its embedded cluster as the
# administrator, whose password serve wrote into pg-secret.
use_embedded_admin() {
  export PGPASSWORD=$(cat "$dir/pg-secret") PGHOST=127.0.0.1 PGPORT=$(sed -n 4p "$dir/pg/postmaster.pid")
  export PGUSER=gatehouse_admin PGDATABASE=gatehouse
}
# Runs SQL there and prints its rows, unaligned; an error fails the caller.
admin_sql() { psql -q -v ON_ERROR_STOP=1 -Atc "$1"; }
# Milliseconds of CPU per call: ms_per_call TICKS CALLS.
ms_per_call() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", t * 1000 / hz / n}'; }

start_fastecho() {
  local echo_bin=${CARGO_TARGET_DIR:-target}/fastecho/release/fastecho
  [[ -x $echo_bin ]] || cargo build --release --manifest-path "$shared/perf/fastecho/Cargo.toml" --target-dir "${CARGO_TARGET_DIR:-target}/fastecho"
  "$echo_bin" "127.0.0.1:$1" 2>/dev/null &
  echo_pid=$!
  trap 'kill $echo_pid 2>/dev/null' EXIT
  until curl -s -o /dev/null "http://127.0.0.1:$1/mcp"; do sleep 0.05; done
}

start_serve() {
  local port=$1
  shift
  bin=${GATEHOUSE_BIN:-${CARGO_TARGET_DIR:-target}/release/gatehouse}
  [[ -x $bin ]] || cargo build --release --locked --bin gatehouse
  dir=$(mktemp -d /tmp/gatehouse-bench-XXXXXX)
  chmod 755 "$dir" # the embedded cluster runs as an unprivileged user when we are root
  export GATEHOUSE_DATA_DIR=$dir GATEHOUSE_LISTEN=127.0.0.1:$port RUST_LOG=warn
  "$@" "$bin" serve 2>/dev/null &
  pid=$!
  trap 'kill ${echo_pid:-} 2>/dev/null || true; kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
  until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do
    kill -0 "$pid" 2>/dev/null || { echo "gatehouse serve exited" >&2; exit 1; }
    sleep 0.05
  done
}

provision_machine() {
  "$bin" tenant create bench --name Bench >/dev/null
  mapfile -t sc < <("$bin" service-credential create --tenant bench --name bench)
  mapfile -t tok < <("$bin" token create --tenant bench --name bench)
  # The pair as curl's and wrk's header arguments.
  auth=(-H "Gatehouse-Client-Id: ${sc[1]}" -H "Gatehouse-Client-Secret: ${sc[2]}" -H "Authorization: Bearer ${tok[1]}")
}

start_gateway() {
  local port=$1 echo_port=$2
  shift 2
  start_fastecho "$echo_port"
  start_serve "$port" "$@"
  provision_machine
  "$bin" workspace create --tenant bench main >/dev/null
  "$bin" connector add --tenant bench --workspace main --id fastecho --kind remote_mcp --url "http://127.0.0.1:$echo_port/mcp" >/dev/null
  headers=$(printf '{"Gatehouse-Client-Id":"%s","Gatehouse-Client-Secret":"%s","Authorization":"Bearer %s"}' "${sc[1]}" "${sc[2]}" "${tok[1]}")
  gw="http://127.0.0.1:$port/t/bench/w/main/mcp"
  # Warm up the gateway's downstream session and catalog.
  wrk_result "$gw" "$headers" 1 2s call_tool "$echo_call" hello >/dev/null
}

# nginx, the cheapest L7 proxy (one worker, keep-alive upstream, no buffering), in front of
# 127.0.0.1:UPSTREAM on 127.0.0.1:LISTEN: start_nginx UPSTREAM LISTEN sets ngx (its directory)
# and ngx_worker (the worker's pid, for CPU per call). The caller's exit trap runs stop_nginx.
# MCP servers may check Host (rmcp's do), so the upstream's own is sent.
start_nginx() {
  ngx=$(mktemp -d /tmp/gatehouse-nginx-XXXXXX)
  cat >"$ngx/nginx.conf" <<CONF
worker_processes 1;
pid $ngx/nginx.pid;
error_log $ngx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$1; keepalive 64; }
  server {
    listen 127.0.0.1:$2;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host 127.0.0.1:$1;
      proxy_buffering off;
    }
  }
}
CONF
  nginx -c "$ngx/nginx.conf"
  ngx_worker=$(pgrep -P "$(cat "$ngx/nginx.pid")" | head -1)
}
stop_nginx() {
  [[ -n ${ngx:-} ]] || return 0
  nginx -c "$ngx/nginx.conf" -s stop 2>/dev/null
  rm -rf "$ngx"
}
