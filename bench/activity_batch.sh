#!/usr/bin/env bash
# The activity writer's batch statement in its two forms, timed by pgbench in one embedded
# database, rounds alternated:
#   from    the arrays unnested in FROM (`SELECT * FROM unnest(a, b, …)`): PostgreSQL gathers
#           every row into a tuplestore before the insert reads it (the writer before c4e07d2);
#   select  the arrays unnested in the select list (`SELECT unnest(a), unnest(b), …`): each row
#           goes on to the insert as it is made (the writer's form now).
# A transaction is one batch of 256 rows, written as the writer writes it: the application
# role, the platform scope, synchronous_commit off. The arrays are built in the statement
# (the same expressions in both forms), so the time per batch includes building them.
#
#   bash bench/activity_batch.sh [TRANSACTIONS] [ROUNDS]   # defaults 400, 3; needs pgbench
set -euo pipefail
cd "$(dirname "$0")/.."
transactions=${1:-400} rounds=${2:-3}
source bench/lib.sh
start_serve 18831
provision_machine
"$bin" workspace create --tenant bench main >/dev/null
use_embedded_admin
tenant=$(admin_sql "SELECT id FROM tenants WHERE slug = 'bench'")
workspace=$(admin_sql "SELECT id FROM workspaces WHERE tenant_id = '$tenant'")

# The 21 columns' arrays, in the writer's order.
fill() { printf "array_fill(%s, ARRAY[256])" "$1"; }
arrays=(
  "$(fill "'$tenant'::uuid")" "(SELECT array_agg(clock_timestamp()) FROM generate_series(1, 256))"
  "(SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 256))" "$(fill "'$workspace'::uuid")"
  "$(fill "'req-0123456789'::text")" "$(fill "'token'::text")" "$(fill "'0190f3a2-token'::text")"
  "$(fill "'fastecho'::text")" "$(fill "'echo'::text")" "$(fill "'call_tool'::text")" "$(fill "'ok'::text")"
  "$(fill 1)" "$(fill "NULL::text")" "$(fill "NULL::text")" "$(fill 42)" "$(fill "'wrk'::text")"
  "$(fill "'1'::text")" "$(fill "NULL::text")" "$(fill 0)" "$(fill "NULL::text")" "$(fill "NULL::uuid")"
)
columns="tenant_id, occurred_at, id, workspace_id, request_id, actor_kind, actor_id, connector, tool, source, outcome,
  duration_ms, error_code, classification, result_bytes, client_name, client_version, pool, redactions, quota, approval_id"
batch() { # batch SELECT-CLAUSE
  printf '%s\n' "BEGIN;" "SET LOCAL ROLE gatehouse_app;" "SELECT set_config('gatehouse.platform', 'on', true);" \
    "SET LOCAL synchronous_commit = off;" "INSERT INTO activity ($columns) $1;" "COMMIT;"
}
joined=$(IFS=,; echo "${arrays[*]}")
batch "SELECT * FROM unnest($joined)" >"$dir/from.sql"
batch "SELECT $(printf 'unnest(%s), ' "${arrays[@]}" | sed 's/, $//')" >"$dir/select.sql"

for r in $(seq "$rounds"); do
  for form in from select; do
    before=$(admin_sql "SELECT count(*) FROM activity")
    latency=$(pgbench -n -f "$dir/$form.sql" -c 1 -t "$transactions" 2>&1 | sed -n 's/^latency average = //p')
    after=$(admin_sql "SELECT count(*) FROM activity")
    echo "round $r $form: $latency per batch of 256 rows ($((after - before)) rows written)"
  done
done
