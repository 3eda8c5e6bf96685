#!/usr/bin/env bash
# What each part of the kv compare-and-set's body costs: pgbench at 16 clients drives
# `gatehouse_kv_cas` (one swap of a client's own key per statement, as `cargo bench --bench cas`
# does) in several forms, next to pgbench's single-row UPDATE, rounds alternated, one database.
#   now       the function and the tables as migrated; a prune is due on one call in 16, drawn
#             at random per call, as the replicas draw it (`kv::PRUNE_EVERY`)
#   every     the same, with a prune due on every call (the cadence before migration
#             20261218000001)
#   lock      a prune due on every call, and its locking delete run without the probe before it
#   role      `SET LOCAL ROLE` run on every call, also where the role is already the same
#   fk        the admin log's tenant checked by its old foreign key instead of the row trigger
#   check     the key's length checked by its old CHECK constraint instead of the row trigger
#   before    the function of migration 20261216000001 (prune on every call, no probe, role set
#             on every call) with the foreign key and the CHECK: the body before migrations
#             20261217000001, 20261217000002 and 20261218000001
# and three forms that take a required part away, to show what each costs (at the cadence):
#   nolog     no admin-log row
#   untenanted  the admin-log row's tenant not checked (no trigger, no foreign key)
#   norls     no row-level security on kv_entries and admin_log
# The clients run as the application role, as the replicas' connections do.
#
#   bash bench/kv_cas_parts.sh [SECONDS] [ROUNDS]    # defaults 5, 3; needs pgbench and psql
#   PERF=FILE bash bench/kv_cas_parts.sh 5 1         # also perf-records the first `now` figure
#   CALLGRIND=CALLS bash bench/kv_cas_parts.sh       # instructions per call instead, counted by
#                                                    # valgrind in one single-user backend
#   MULTIXACT=SECONDS bash bench/kv_cas_parts.sh     # after the rounds, the multixacts each form
#                                                    # creates per decision, one run each
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5} rounds=${2:-3} clients=16
source bench/lib.sh
start_serve 18821
bindir=$(dirname "$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)")
use_embedded_admin

# A tenant with one live key per client, and the counter table of the UPDATE.
tenant=$(admin_sql "SELECT gen_random_uuid()")
admin_sql "INSERT INTO tenants (id, slug, name) VALUES ('$tenant', 'bench-parts', 'Bench');
     INSERT INTO kv_entries (tenant_id, key, value) SELECT '$tenant', 'p' || i, '1' FROM generate_series(1, $clients) i;
     CREATE TABLE bench_counter (id int PRIMARY KEY, v bigint NOT NULL);
     INSERT INTO bench_counter SELECT i, 0 FROM generate_series(1, $clients) i;
     GRANT UPDATE, SELECT ON bench_counter TO gatehouse_app"

# The function's forms, each a copy of the migrated definition with one part put back, or
# (before) the definition of migration 20261216000001.
now=$(admin_sql "SELECT pg_get_functiondef('gatehouse_kv_cas'::regproc)")
variant() { # NAME, then the definition on stdin
  admin_sql "$(sed -E "s/(public\.)?gatehouse_kv_cas\(/public.gatehouse_kv_cas_$1(/")"
  admin_sql "GRANT EXECUTE ON FUNCTION gatehouse_kv_cas_$1 TO gatehouse_app"
}
unprobed() { perl -0pe 's/        PERFORM FROM kv_entries[^\n]*\n        IF FOUND THEN\n(.*?doomed\.key;\n)        END IF;\n/$1/s'; }
unlogged() { perl -0pe 's/    IF won THEN\n.*?    END IF;\n//s'; }
unguarded() { perl -0pe 's/    IF current_user <> .gatehouse_app. THEN\n        (SET LOCAL ROLE gatehouse_app;)\n    END IF;/    $1/s'; }
variant now <<<"$now"
variant lock < <(unprobed <<<"$now")
variant role < <(unguarded <<<"$now")
variant nolog < <(unlogged <<<"$now")
variant before < <(awk '/^CREATE FUNCTION gatehouse_kv_cas\(/ {p = 1} p {print} p && /^\$\$;/ {p = 0}' migrations/20261216000001_kv_cas_statement.sql)
for v in lock role nolog before; do
  # Each edit must have applied: the variant differs from the migrated function.
  [[ $(admin_sql "SELECT pg_get_functiondef('gatehouse_kv_cas_$v'::regproc)" | sed "s/_$v(/(/") != "$now" ]] || { echo "variant $v unchanged" >&2; exit 1; }
done
# The tables' old checks, put back for a form and taken away after it (one line each, for
# the single-user backend).
no_key="DROP TRIGGER admin_log_tenant_check ON admin_log"
key="CREATE TRIGGER admin_log_tenant_check BEFORE INSERT OR UPDATE OF tenant_id ON admin_log FOR EACH ROW EXECUTE FUNCTION gatehouse_admin_log_tenant_exists()"
old_key="$no_key; ALTER TABLE admin_log ADD CONSTRAINT admin_log_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) NOT VALID"
new_key="ALTER TABLE admin_log DROP CONSTRAINT admin_log_tenant_id_fkey; $key"
old_check="DROP TRIGGER kv_entries_key_check ON kv_entries; ALTER TABLE kv_entries ADD CONSTRAINT kv_entries_key_check CHECK (octet_length(key) BETWEEN 1 AND 512) NOT VALID"
new_check="ALTER TABLE kv_entries DROP CONSTRAINT kv_entries_key_check; CREATE TRIGGER kv_entries_key_check BEFORE INSERT OR UPDATE OF key ON kv_entries FOR EACH ROW EXECUTE FUNCTION gatehouse_kv_key_fits()"
no_rls="ALTER TABLE kv_entries NO FORCE ROW LEVEL SECURITY; ALTER TABLE kv_entries DISABLE ROW LEVEL SECURITY; ALTER TABLE admin_log NO FORCE ROW LEVEL SECURITY; ALTER TABLE admin_log DISABLE ROW LEVEL SECURITY"
rls="ALTER TABLE kv_entries ENABLE ROW LEVEL SECURITY; ALTER TABLE kv_entries FORCE ROW LEVEL SECURITY; ALTER TABLE admin_log ENABLE ROW LEVEL SECURITY; ALTER TABLE admin_log FORCE ROW LEVEL SECURITY"
put_back() { case $1 in fk) echo "$old_key" ;; check) echo "$old_check" ;; before) echo "$old_key; $old_check" ;; untenanted) echo "$no_key" ;; norls) echo "$no_rls" ;; esac; }
take_away() { case $1 in fk) echo "$new_key" ;; check) echo "$new_check" ;; before) echo "$new_key; $new_check" ;; untenanted) echo "$key" ;; norls) echo "$rls" ;; esac; }
# Into a form's tables and out again, on the running server.
enter() { [[ -z $(put_back "$1") ]] || admin_sql "$(put_back "$1")" >/dev/null; }
leave() { [[ -z $(take_away "$1") ]] || admin_sql "$(take_away "$1")" >/dev/null; }
# The function each form calls, and whether its calls prune at the replicas' cadence (else a
# prune is due on every call).
function_of() { case $1 in every | fk | check | untenanted | norls) echo now ;; *) echo "$1" ;; esac; }
at_cadence() { case $1 in now | role | fk | check | nolog | untenanted | norls) true ;; *) false ;; esac; }
every=16 batch=100 # kv::PRUNE_EVERY, kv::PRUNE_BATCH
forms=(now every lock role fk check before nolog untenanted norls)
call() { # FORM PRUNE-ARGUMENT: the statement a client runs
  echo "SELECT gatehouse_kv_cas_$(function_of "$1")('$tenant', 'p' || $3, 'update', '1', '1', NULL, $2, gen_random_uuid(), 'bench', 'kv-p', '{\"value\": 1}', '{\"value\": 1}', NULL);"
}

if [[ -n ${CALLGRIND:-} ]]; then
  # One backend in single-user mode under callgrind, the server stopped: each form's calls
  # (a prepared statement executed CALLGRIND times, each its own transaction) less a run of
  # one call, divided. Deterministic, unlike the rates below.
  calls=$CALLGRIND
  postgres=$(readlink "/proc/$(head -1 "$dir/pg/postmaster.pid")/exe")
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  while [[ -e $dir/pg/postmaster.pid ]]; do sleep 0.2; done
  os_user=$(stat -c %U "$dir/pg")
  work=$(mktemp -d)
  chown "$os_user" "$work" # callgrind writes its counts there as the cluster's user
  single() { # INPUT-FILE [OUT-FILE]: one single-user backend as the cluster's user, under callgrind with OUT-FILE
    local tool=()
    [[ -z ${2:-} ]] || tool=(valgrind --tool=callgrind "--callgrind-out-file=$2")
    runuser -u "$os_user" -- "${tool[@]}" "$postgres" --single -D "$dir/pg" gatehouse <"$1" >"$work/out.log" 2>&1 || { cat "$work/out.log" >&2; exit 1; }
    ! grep -q "ERROR" "$work/out.log" || { grep ERROR "$work/out.log" >&2; exit 1; }
  }
  per_call() { # PREPARE-STATEMENT: instructions per EXECUTE
    local n total=()
    for n in 1 $((calls + 1)); do
      { echo "SET role gatehouse_app;"; echo "$1"; awk -v n="$n" 'BEGIN {for (i = 0; i < n; i++) print "EXECUTE step;"}'; } >"$work/in.sql"
      chmod 644 "$work/in.sql"
      single "$work/in.sql" "$work/cg.out"
      total+=("$(awk '/^totals:/ {print $2}' "$work/cg.out")")
    done
    echo $(((total[1] - total[0]) / calls))
  }
  update=$(per_call "PREPARE step AS UPDATE bench_counter SET v = v + 1 WHERE id = 1;")
  # A form at the cadence: its calls with no prune due and with one due, weighted 15 to 1.
  echo "| form | no prune due | a prune due | per call | of the UPDATE's |"
  echo "|---|---|---|---|---|"
  echo "| UPDATE | | | $update | 1.00 |"
  for v in "${forms[@]}"; do
    if [[ -n $(put_back "$v") ]]; then echo "$(put_back "$v");" >"$work/ddl.sql"; single "$work/ddl.sql"; fi
    due=$(per_call "PREPARE step AS $(call "$v" "$batch" 1)")
    if at_cadence "$v"; then
      idle=$(per_call "PREPARE step AS $(call "$v" 0 1)")
      n=$(((idle * (every - 1) + due) / every))
    else
      idle="" n=$due
    fi
    if [[ -n $(take_away "$v") ]]; then echo "$(take_away "$v");" >"$work/ddl.sql"; single "$work/ddl.sql"; fi
    echo "| $v | $idle | $due | $n | $(awk -v a="$n" -v b="$update" 'BEGIN {printf "%.2f", a / b}') |"
  done
  rm -rf "$work"
  exit 0
fi

scripts=$(mktemp -d)
echo 'UPDATE bench_counter SET v = v + 1 WHERE id = :client_id + 1;' >"$scripts/update.sql"
for v in "${forms[@]}"; do
  if at_cadence "$v"; then
    printf '%s\n' '\set id :client_id + 1' "\\set prune case when random(1, $every) = 1 then $batch else 0 end" "$(call "$v" :prune :id)"
  else
    printf '%s\n' '\set id :client_id + 1' "$(call "$v" "$batch" :id)"
  fi >"$scripts/$v.sql"
done
# pgbench at 16 clients running a form's script (or update's): run FORM SECONDS.
run() { PGOPTIONS="-c role=gatehouse_app" "$bindir/pgbench" -n -M prepared -c "$clients" -j 2 -T "$2" -f "$scripts/$1.sql" 2>&1; }
tps() { # runs in a command substitution, so a recorder it starts is waited for here
  local recorder=
  if [[ $1 == now && -n ${PERF:-} && ! -e $PERF ]]; then
    # Every process of the machine, from a second in to a second before the end.
    perf record -F 1999 -g -a -o "$PERF" -D 1000 -- sleep $((seconds - 1)) >/dev/null 2>&1 &
    recorder=$!
  fi
  run "$1" "$seconds" | awk '/^tps = / {printf "%.0f", $3}'
  [[ -z $recorder ]] || wait "$recorder"
}
head="| round | UPDATE tps" rule="|---|---"
for v in "${forms[@]}"; do head="$head | $v" rule="$rule|---"; done
echo "$head |"
echo "$rule|"
for r in $(seq "$rounds"); do
  row="| $r"
  update=$(tps update)
  row="$row | $update"
  for v in "${forms[@]}"; do
    enter "$v"
    t=$(tps "$v")
    leave "$v"
    row="$row | $t ($(awk -v a="$t" -v b="$update" 'BEGIN {printf "%.0f%%", a * 100 / b}'))"
  done
  echo "$row |"
done
if [[ -n ${MULTIXACT:-} ]]; then
  # PostgreSQL's next multixact id, read from the control file after a checkpoint, before and
  # after one run of each form: every shared row lock held by two transactions at once takes
  # a new one. Checkpoints are kept out of the rounds above (their full-page writes would
  # slow the next figure).
  next_multixact() { admin_sql "CHECKPOINT" && admin_sql "SELECT next_multixact_id::text FROM pg_control_checkpoint()"; }
  echo
  echo "| form | decisions | multixacts | per decision |"
  echo "|---|---|---|---|"
  for v in "${forms[@]}"; do
    enter "$v"
    m0=$(next_multixact)
    n=$(run "$v" "$MULTIXACT" | awk '/actually processed/ {print $NF}')
    m1=$(next_multixact)
    leave "$v"
    echo "| $v | $n | $((m1 - m0)) | $(awk -v m=$((m1 - m0)) -v n="$n" 'BEGIN {printf "%.3f", m / n}') |"
  done
fi
rm -rf "$scripts"
