#!/usr/bin/env bash
# Time and peak RSS of `gatehouse tenant export` for a tenant with ROWS activity rows (1
# million by default), next to pg_dump of the same tenant's activity rows from the same
# database in the same run (the cheapest way to get them out), rounds alternated.
#
#   bash bench/tenant_export.sh [BINARY] [ROWS] [ROUNDS]
#     BINARY defaults to target/release/gatehouse (built if missing); needs the PostgreSQL 15
#     server packages and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/gatehouse}
rows=${2:-1000000}
rounds=${3:-2}
[[ -x $bin ]] || cargo build --release --locked --bin gatehouse
bin=$(realpath "$bin")
pg=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/gatehouse-exportbench-XXXXXX)
chmod 755 "$dir"
port=$((20000 + RANDOM % 20000))
as_pg=()
if [[ $(id -u) == 0 ]]; then as_pg=(runuser -u postgres --); chown postgres "$dir"; fi
"${as_pg[@]}" "$pg/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
"${as_pg[@]}" "$pg/pg_ctl" -D "$dir/data" -o "-p $port -k $dir -c listen_addresses=127.0.0.1" -l "$dir/pg.log" -w start >/dev/null
trap '"${as_pg[@]}" "$pg/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1; rm -rf "$dir"' EXIT
psql=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres)
"${psql[@]}" -d postgres -c "CREATE ROLE gatehouse_owner LOGIN CREATEROLE PASSWORD 'bench'" -c "CREATE DATABASE gatehouse OWNER gatehouse_owner"
export DATABASE_URL="postgres://gatehouse_owner:bench@127.0.0.1:$port/gatehouse"
export GATEHOUSE_VAULT_KEYS="bench:$(openssl rand -base64 32)" RUST_LOG=warn
"$bin" migrate >/dev/null
"$bin" tenant create acme --name Acme >/dev/null
"$bin" workspace create --tenant acme main >/dev/null
"${psql[@]}" -d gatehouse -U gatehouse_owner <<SQL
BEGIN;
SELECT set_config('gatehouse.platform', 'on', true);
INSERT INTO activity (tenant_id, occurred_at, id, workspace_id, actor_kind, actor_id, tool, source, outcome, duration_ms)
SELECT t.id, now() - make_interval(secs => g), gen_random_uuid(), w.id, 'token', 'bench-token', 'call_tool', 'gateway', 'ok', g % 97
  FROM tenants t JOIN workspaces w ON w.tenant_id = t.id, generate_series(1, $rows) g
 WHERE t.slug = 'acme';
COMMIT;
SQL
"${psql[@]}" -d gatehouse -U gatehouse_owner -c "VACUUM ANALYZE activity"
size=$("${psql[@]}" -d gatehouse -U gatehouse_owner -tA -c "SELECT pg_size_pretty(pg_total_relation_size('activity'))")
echo "activity: $rows rows, $size on disk; $(nproc) cores; $bin"
"$bin" tenant transfer-key --to "$dir/key" >/dev/null

measure() { # measure LABEL command…  -> "| LABEL | seconds | peak RSS MiB | output MiB |"
  local label=$1; shift
  /usr/bin/time -f '%e %M' -o "$dir/time" "$@" >/dev/null
  read -r secs kib <"$dir/time"
  local out_bytes; out_bytes=$(stat -c %s "$dir/out")
  printf '| %s | %s | %.1f | %.1f |\n' "$label" "$secs" "$(echo "$kib / 1024" | bc -l)" "$(echo "$out_bytes / 1048576" | bc -l)"
  rm -f "$dir/out"
}
echo "| what | seconds | peak RSS (MiB) | file (MiB) |"
echo "| --- | --- | --- | --- |"
for ((r = 1; r <= rounds; r++)); do
  measure "gatehouse tenant export (round $r)" "$bin" tenant export --tenant acme --to "$dir/out" --key-file "$dir/key"
  measure "pg_dump --data-only -t activity (round $r)" pg_dump -h 127.0.0.1 -p "$port" -U postgres --data-only -t activity -f "$dir/out" gatehouse
done
