#!/usr/bin/env bash
# Time from `gatehouse serve` to a 200 on /readyz on the embedded default: the first run
# (initdb + bootstrap + migrations) and a restart (cluster kept), N times each.
#
#   bash bench/ready.sh [N]        # uses target/release/gatehouse (built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
bin=target/release/gatehouse
[[ -x $bin ]] || cargo build --release --locked
port=18391
dir=$(mktemp -d /tmp/gatehouse-ready-XXXXXX)
chmod 755 "$dir" # the embedded cluster runs as an unprivileged user when we are root
trap 'rm -rf "$dir"' EXIT

ms_now() { date +%s%N | cut -c1-13; }
once() { # once DATA_DIR → prints milliseconds to ready
  local start end pid
  start=$(ms_now)
  GATEHOUSE_DATA_DIR=$1 GATEHOUSE_LISTEN=127.0.0.1:$port RUST_LOG=warn "$bin" serve 2>/dev/null &
  pid=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do
    kill -0 "$pid" 2>/dev/null || { echo "gatehouse serve exited" >&2; exit 1; }
    sleep 0.005
  done
  end=$(ms_now)
  kill -TERM "$pid"; wait "$pid"
  echo $((end - start))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

first=(); restart=()
for i in $(seq "$n"); do
  rm -rf "$dir/data"
  first+=("$(once "$dir/data")")
  restart+=("$(once "$dir/data")")
done
echo "first run (initdb): ${first[*]} ms; median $(printf '%s\n' "${first[@]}" | median) ms"
echo "restart:            ${restart[*]} ms; median $(printf '%s\n' "${restart[@]}" | median) ms"
