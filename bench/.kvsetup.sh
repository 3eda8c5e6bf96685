#!/usr/bin/env bash
# What each part of the kv compare-and-set's body costs: pgbench at 16 clients drives
# `gatehouse_kv_cas` (one swap of a client's own key per statement, as `cargo bench --bench cas`
# does) in several forms, next to pgbench's single-row UPDATE, rounds alternated, one database.
#   now       the function and the admin log as migrated (migration 20261217000001)
#   fk        the admin log's tenant checked by its old foreign key instead of the row trigger
#   lock      the prune's locking delete run on every call, without the probe before it
#   role      `SET LOCAL ROLE` run on every call, also where the role is already the same
#   before    all three at once: the function and the key of migration 20261216000001
# The clients run as the application role, as the replicas' connections do.
#
#   bash bench/kv_cas_parts.sh [SECONDS] [ROUNDS]    # defaults 5, 3; needs pgbench and psql
set -euo pipefail
[[ -n ${TRACE:-} ]] && set -x
cd "$(dirname "$0")/.."
seconds=${1:-5} rounds=${2:-3} clients=16
source bench/lib.sh
start_serve 18821
port=$(sed -n 4p "$dir/pg/postmaster.pid")
bindir=$(dirname "$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)")
export PGPASSWORD=$(cat "$dir/pg-secret") PGHOST=127.0.0.1 PGPORT=$port PGUSER=gatehouse_admin PGDATABASE=gatehouse
sql() { psql -q -v ON_ERROR_STOP=1 -Atc "$1"; }

# A tenant with one live key per client, and the counter table of the UPDATE.
tenant=$(sql "SELECT gen_random_uuid()")
sql "INSERT INTO tenants (id, slug, name) VALUES ('$tenant', 'bench-parts', 'Bench');
     INSERT INTO kv_entries (tenant_id, key, value) SELECT '$tenant', 'p' || i, '1' FROM generate_series(1, $clients) i;
     CREATE TABLE bench_counter (id int PRIMARY KEY, v bigint NOT NULL);
     INSERT INTO bench_counter SELECT i, 0 FROM generate_series(1, $clients) i;
     GRANT UPDATE, SELECT ON bench_counter TO gatehouse_app"

# The function's forms, each a copy of the migrated definition with one part put back.
now=$(sql "SELECT pg_get_functiondef('gatehouse_kv_cas'::regproc)")
variant() { # NAME, then the definition on stdin
  sql "$(sed "s/public\.gatehouse_kv_cas(/public.gatehouse_kv_cas_$1(/")"
  sql "GRANT EXECUTE ON FUNCTION gatehouse_kv_cas_$1 TO gatehouse_app"
}
unprobed() { perl -0pe 's/    IF EXISTS \(SELECT 1 FROM kv_entries[^\n]*\n(.*?doomed\.key;\n)    END IF;\n/$1/s'; }
unguarded() { perl -0pe 's/    IF current_user <> .gatehouse_app. THEN\n        (SET LOCAL ROLE gatehouse_app;)\n    END IF;/    $1/s'; }
variant now <<<"$now"
variant fk <<<"$now"
variant lock < <(unprobed <<<"$now")
variant role < <(unguarded <<<"$now")
variant before < <(unprobed <<<"$now" | unguarded)
for v in lock role before; do
  # Each edit must have applied: the variant differs from the migrated function.
  [[ $(sql "SELECT pg_get_functiondef('gatehouse_kv_cas_$v'::regproc)" | sed "s/_$v(/(/") != "$now" ]] || { echo "variant $v unchanged" >&2; exit 1; }
done
foreign_key="DROP TRIGGER admin_log_tenant_check ON admin_log;
  ALTER TABLE admin_log ADD CONSTRAINT admin_log_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) NOT VALID"
trigger="ALTER TABLE admin_log DROP CONSTRAINT admin_log_tenant_id_fkey;
  CREATE TRIGGER admin_log_tenant_check BEFORE INSERT OR UPDATE OF tenant_id ON admin_log
    FOR EACH ROW EXECUTE FUNCTION gatehouse_admin_log_tenant_exists()"

scripts=$(mktemp -d)
echo 'UPDATE bench_counter SET v = v + 1 WHERE id = :client_id + 1;' >"$scripts/update.sql"
for v in now fk lock role before; do
  printf '%s\n' '\set id :client_id + 1' \
    "SELECT gatehouse_kv_cas_$v('$tenant', 'p' || :id, 'update', '1', '1', NULL, 100, gen_random_uuid(), 'bench', 'kv-p', '{\"value\": 1}', '{\"value\": 1}', NULL);" \
    >"$scripts/$v.sql"
done
tps() {
  PGOPTIONS="-c role=gatehouse_app" "$bindir/pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$scripts/$1.sql" 2>&1 |
    awk '/^tps = / {printf "%.0f", $3}'
}
