# Shared by the gateway benchmarks (sourced, not run): builds what is missing, starts the fast
# downstream (fastecho) on ECHO_PORT and `gatehouse serve` on the embedded default on PORT,
# provisions tenant `bench` / workspace `main` / connector `fastecho` and machine credentials,
# and cleans everything up on exit. Sets: shared, bin, dir, echo_pid, pid, headers, gw.
#
#   start_gateway PORT ECHO_PORT      # extra environment for serve: export it before
start_gateway() {
  local port=$1 echo_port=$2 target=${CARGO_TARGET_DIR:-target}
  shared=$(cd ../shared && pwd)
  bin=$target/release/gatehouse
  local echo_bin=$target/fastecho/release/fastecho
  [[ -x $bin ]] || cargo build --release --locked --bin gatehouse
  [[ -x $echo_bin ]] || cargo build --release --manifest-path "$shared/perf/fastecho/Cargo.toml" --target-dir "$target/fastecho"
  dir=$(mktemp -d /tmp/gatehouse-bench-XXXXXX)
  chmod 755 "$dir" # the embedded cluster runs as an unprivileged user when we are root
  "$echo_bin" "127.0.0.1:$echo_port" 2>/dev/null &
  echo_pid=$!
  export GATEHOUSE_DATA_DIR=$dir GATEHOUSE_LISTEN=127.0.0.1:$port RUST_LOG=warn
  "$bin" serve 2>/dev/null &
  pid=$!
  trap 'kill $echo_pid 2>/dev/null; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
  until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do
    kill -0 "$pid" 2>/dev/null || { echo "gatehouse serve exited" >&2; exit 1; }
    sleep 0.05
  done
  "$bin" tenant create bench --name Bench >/dev/null
  "$bin" workspace create --tenant bench main >/dev/null
  "$bin" connector add --tenant bench --workspace main --id fastecho --kind remote_mcp --url "http://127.0.0.1:$echo_port/mcp" >/dev/null
  local sc tok
  mapfile -t sc < <("$bin" service-credential create --tenant bench --name bench)
  mapfile -t tok < <("$bin" token create --tenant bench --name bench)
  headers=$(printf '{"Gatehouse-Client-Id":"%s","Gatehouse-Client-Secret":"%s","Authorization":"Bearer %s"}' "${sc[1]}" "${sc[2]}" "${tok[1]}")
  gw="http://127.0.0.1:$port/t/bench/w/main/mcp"
}
