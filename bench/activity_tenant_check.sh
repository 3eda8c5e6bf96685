#!/usr/bin/env bash
# call_tool at 32 connections with activity's tenant checked per statement (the trigger of
# migration 20261216000002, the default) and per row (the foreign key it replaced), rounds
# alternated in one `gatehouse serve` against one database: only the check differs. Prints the
# calls/s and the CPU per call of the whole machine (busy and idle), the gateway, the
# downstream (fastecho) and every postgres process.
#
#   bash bench/activity_tenant_check.sh [DURATION] [ROUNDS]   # defaults 8s, 3
# Needs wrk and psql.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-8s} rounds=${2:-3}
source bench/lib.sh
start_gateway 18811 9811
use_embedded_admin
per_row="DROP TRIGGER activity_tenant_on_insert ON activity; DROP TRIGGER activity_tenant_on_update ON activity;
  ALTER TABLE activity ADD CONSTRAINT activity_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) NOT VALID"
per_statement="ALTER TABLE activity DROP CONSTRAINT activity_tenant_id_fkey;
  CREATE TRIGGER activity_tenant_on_insert AFTER INSERT ON activity REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_activity_tenants_exist();
  CREATE TRIGGER activity_tenant_on_update AFTER UPDATE ON activity REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_activity_tenants_exist()"
# Busy and idle ticks of the whole machine.
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
round() {
  local b0 i0 b1 i1 g0 g1 e0 e1 p0 p1 line n
  read -r b0 i0 < <(machine); g0=$(ticks "$pid"); e0=$(ticks "$echo_pid"); p0=$(pg_ticks)
  line=$(wrk_result "$gw" "$headers" 32 "$duration" call_tool "$echo_call" hello)
  read -r b1 i1 < <(machine); g1=$(ticks "$pid"); e1=$(ticks "$echo_pid"); p1=$(pg_ticks)
  n=$(requests_in "$line")
  echo "round $2 $1 $(grep -o 'rps=[0-9.]*' <<<"$line") ms_per_call: machine_busy=$(ms_per_call $((b1 - b0)) "$n")" \
    "machine_idle=$(ms_per_call $((i1 - i0)) "$n") gateway=$(ms_per_call $((g1 - g0)) "$n")" \
    "fastecho=$(ms_per_call $((e1 - e0)) "$n") postgres=$(ms_per_call $((p1 - p0)) "$n")"
}
for r in $(seq "$rounds"); do
  round per_statement "$r"
  admin_sql "$per_row" >/dev/null
  round per_row "$r"
  admin_sql "$per_statement" >/dev/null
done
