#!/usr/bin/env bash
# Regenerates the offline query data in .sqlx/ (what `sqlx::query!` and friends check against
# when the build has no database, i.e. always: .cargo/config.toml sets SQLX_OFFLINE=true):
#
#   bash scripts/sqlx-prepare.sh           # after adding or changing a query; commit .sqlx/
#   bash scripts/sqlx-prepare.sh --check   # CI: fails when .sqlx/ is stale or incomplete
#
# It starts a throwaway PostgreSQL cluster from the machine's server binaries (as an
# unprivileged user when run as root: initdb refuses root), applies migrations/ with sqlx-cli,
# runs `cargo sqlx prepare [--check] -- --all-targets` against it, then stops and removes the
# cluster. sqlx-cli is installed from crates.io when missing, pinned to the sqlx in Cargo.lock.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=()
case ${1:-} in
  "") ;;
  --check) check=(--check) ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# sqlx-cli at exactly the version of the sqlx crate the build uses: the offline data's format
# and the macros' checks belong to that version.
version=$(awk '/^name = "sqlx"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
[[ -n $version ]] || { echo "sqlx-prepare: no sqlx package in Cargo.lock" >&2; exit 1; }
if [[ $(cargo sqlx --version 2>/dev/null | awk '{ print $NF }') != "$version" ]]; then
  echo "== installing sqlx-cli $version (PostgreSQL only)"
  cargo install sqlx-cli --version "$version" --locked --no-default-features --features postgres
fi

# The newest PostgreSQL server binaries, as the embedded cluster finds them.
bin=
if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
  bin=$(dirname "$(command -v initdb)")
else
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5 -n); do
    [[ -x $dir/initdb && -x $dir/pg_ctl ]] && bin=$dir
  done
fi
[[ -n $bin ]] || { echo "sqlx-prepare: no PostgreSQL server binaries; apt-get install postgresql" >&2; exit 1; }

# Under /tmp so an unprivileged server user can reach it even from a checkout under /root.
work=$(mktemp -d /tmp/gatehouse-sqlx-prepare.XXXXXX)
chmod 711 "$work"
pgdata=$work/pg
as_pg=()
if ((EUID == 0)); then
  user=postgres
  if ! id "$user" >/dev/null 2>&1; then
    user=gatehouse
    id "$user" >/dev/null 2>&1 \
      || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$user"
  fi
  as_pg=(runuser -u "$user" --)
fi

stop() {
  if [[ -f $pgdata/postmaster.pid ]]; then
    "${as_pg[@]}" "$bin/pg_ctl" -D "$pgdata" stop -m immediate -w >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap stop EXIT

# A random password for the throwaway superuser: the server listens on loopback, where any
# local user could otherwise connect.
password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$password" >"$work/pw"
mkdir -m 700 "$pgdata"
if ((${#as_pg[@]})); then chown "$user": "$pgdata" "$work/pw"; fi
(cd "$work" && "${as_pg[@]}" "$bin/initdb" -D "$pgdata" -U postgres -A scram-sha-256 \
  --pwfile="$work/pw" -E UTF8 --locale=C >"$work/initdb.log" 2>&1) \
  || { cat "$work/initdb.log" >&2; exit 1; }
rm -f "$work/pw"
cat >>"$pgdata/postgresql.conf" <<'EOF'
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
synchronous_commit = off
full_page_writes = off
EOF

# A port below the kernel's ephemeral range (as the test harness picks them); retried when taken.
started=
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 12768))
  if (cd "$work" && "${as_pg[@]}" "$bin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -o "-p $port" -w -t 60 start >/dev/null); then
    started=1
    break
  fi
done
[[ -n $started ]] || { echo "sqlx-prepare: PostgreSQL did not start:" >&2; cat "$pgdata/server.log" >&2; exit 1; }

export DATABASE_URL="postgres://postgres:$password@127.0.0.1:$port/gatehouse"
echo "== migrating a throwaway database (PostgreSQL on 127.0.0.1:$port)"
cargo sqlx database create
cargo sqlx migrate run --source migrations >/dev/null
echo "== cargo sqlx prepare ${check[*]}"
cargo sqlx prepare "${check[@]}" -- --all-targets --locked
