#!/usr/bin/env bash
# Records which of the binary's functions a running gateway executes, for the release link's
# symbol ordering (build.rs, docs/decisions.md "Code the gateway runs, laid out together"): the
# gateway runs under callgrind from its first instruction (bench/lib.sh's start_gateway: the
# embedded default, fastecho, provisioning, the warm-up call_tool), then serves call_tool at 2
# connections, the authenticated no-op, /healthz, and what probes and scrapers ask (/readyz,
# /metrics). Every function of the binary that executed is written to OUT, one mangled name per
# line, the most instructions first.
#
#   bash bench/symbol_order.sh BIN [DURATION] [OUT]     # defaults 6s, build/symbol-order.txt
# Rebuild the release binary after writing it; any binary of the same source will do as BIN.
#
#   bash bench/symbol_order.sh --check BIN [LIST]        # LIST defaults to build/symbol-order.txt
# How stale the list is for BIN (a release build of the current source): the listed names BIN
# no longer defines, which the linker skips silently. Exits 1 when more than 1% are gone, the
# sign that a change renamed code the gateway runs and the list wants writing again.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --check ]]; then
  bin_path=${2:?BIN} list=${3:-build/symbol-order.txt}
  listed=$(wc -l <"$list")
  gone=$(comm -23 <(sort -u "$list") <(nm --defined-only "$bin_path" | awk 'NF == 3 {print $3}' | sort -u) | wc -l)
  echo "$gone of $listed names in $list are not defined by $bin_path"
  exit $((gone * 100 > listed))
fi
bin_path=$(realpath "${1:?BIN}") duration=${2:-6s} out=${3:-build/symbol-order.txt}
profile=$(mktemp /tmp/gatehouse-order-XXXXXX)
source bench/lib.sh
GATEHOUSE_BIN=$bin_path start_gateway 18701 9701 valgrind --tool=callgrind --demangle=no --callgrind-out-file="$profile"
wrk_result "$gw" "$headers" 2 "$duration" call_tool "$echo_call" hello >/dev/null
wrk -t1 -c2 -d"$duration" "${auth[@]}" "http://127.0.0.1:18701/api/v1/tenants/bench" >/dev/null
wrk -t1 -c2 -d"$duration" "http://127.0.0.1:18701/healthz" >/dev/null
for _ in 1 2 3; do curl -sf -o /dev/null http://127.0.0.1:18701/readyz; curl -sf -o /dev/null http://127.0.0.1:18701/metrics; done
# The profile is written when the gateway exits.
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
mkdir -p "$(dirname "$out")"
python3 - "$profile" "$bin_path" "$out" <<'PY'
import collections, re, subprocess, sys
profile, binary, out = sys.argv[1:]
# The binary's own function symbols: other objects' functions (libc, the vDSO) are not ordered.
ours = set()
for line in subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    fields = line.split()
    if len(fields) == 3 and fields[1] in "tTwW":
        ours.add(fields[2])
# Self cost per function: a cost line counts for the current fn=, except the one after calls=,
# which is the call's inclusive cost.
names, cost, current, after_call = {}, collections.Counter(), None, False
for line in open(profile):
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        kind, ident, name = m.groups()
        if name:
            names[ident] = name.strip()
        if kind == "fn":
            current = ident
        cost.setdefault(ident, 0)
    elif line.startswith("calls="):
        after_call = True
    elif current and line[:1] in "0123456789+-*":
        fields = line.split()
        if not after_call and len(fields) >= 2 and fields[1].isdigit():
            cost[current] += int(fields[1])
        after_call = False
ranked = sorted(cost, key=lambda i: -cost[i])
kept = [names[i] for i in ranked if names.get(i) in ours]
with open(out, "w") as f:
    f.write("".join(n + "\n" for n in dict.fromkeys(kept)))
print(f"{len(kept)} functions of {len(ours)} written to {out}")
PY
rm -f "$profile"*
