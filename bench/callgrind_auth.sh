#!/usr/bin/env bash
# Instructions per request of the authenticated no-op (GET /api/v1/tenants/{t} with the machine
# pair, as bench/auth.sh sends it) and of GET /healthz, counted by callgrind on one server: the
# gateway runs under `valgrind --tool=callgrind --instr-atstart=no`; instrumentation is on for
# DURATION of wrk at 2 connections per request kind, and each kind is dumped on its own.
#
#   bash bench/callgrind_auth.sh BIN [DURATION] [OUT]   # defaults 10s, /tmp/gatehouse-auth.callgrind
# Prints requests and instructions per request for each; OUT.<pid>.1 (no-op) and .2 (healthz)
# stay for callgrind_annotate. Valgrind hides SHA-NI, so SHA-256 counts as software here.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?BIN}") duration=${2:-10s} out=${3:-/tmp/gatehouse-auth.callgrind}
port=18492
source bench/lib.sh
rm -f "$out".*
GATEHOUSE_BIN=$bin start_serve "$port" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out.%p"
provision_machine
noop="http://127.0.0.1:$port/api/v1/tenants/bench" healthz="http://127.0.0.1:$port/healthz"
for _ in 1 2 3; do curl -sf "${auth[@]}" "$noop" >/dev/null; curl -sf "$healthz" >/dev/null; done
part=0
for what in noop healthz; do
  if [[ $what == noop ]]; then args=("${auth[@]}" "$noop"); else args=("$healthz"); fi
  callgrind_control -z "$pid" >/dev/null
  callgrind_control -i on "$pid" >/dev/null
  r=$(wrk -t1 -c2 -d"$duration" "${args[@]}")
  callgrind_control -i off "$pid" >/dev/null
  callgrind_control -d "$what" "$pid" >/dev/null
  part=$((part + 1))
  sleep 1
  n=$(awk '/requests in/ {print $1}' <<<"$r")
  total=$(callgrind_annotate "$out.$pid.$part" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  echo "$what requests=$n instructions=$total per_request=$((total / n))"
done
