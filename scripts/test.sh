#!/usr/bin/env bash
# The whole test suite, on a fresh clone: installs the test peers it needs from the npm and
# PyPI registries (into ignored folders, under a lock, only when their lock files changed),
# then runs `cargo test --locked --no-fail-fast` with any arguments given (e.g. `--test
# gateway`): every test binary runs even after one fails, so a run reports all its failures.
#
# System packages are not installed here (that needs root and apt): a missing one stops the
# run at once with the package to install. `.ci/run` installs them, then runs this script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
peers="$root/target/peers"
mkdir -p "$peers"

missing=()
need() { # need COMMAND-OR-PATH DEBIAN-PACKAGE
  if [[ $1 == /* ]]; then [[ -x $1 ]] || missing+=("$2"); else command -v "$1" >/dev/null || missing+=("$2"); fi
}
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && ! command -v initdb >/dev/null; then
  missing+=(postgresql)
fi
need node nodejs
need npm npm
need python3 python3
need openssl openssl
# The console's browser tests need Chromium; a run of chosen test binaries may do without.
if (($# == 0)); then
  need /usr/bin/chromium chromium
  need /usr/bin/chromedriver chromium-driver
  # tests/pooler.rs runs Gatehouse behind pgbouncer in transaction mode.
  need /usr/sbin/pgbouncer pgbouncer
  # tests/ha.rs runs a Patroni cluster (etcd as its store) behind haproxy.
  need /usr/bin/patroni patroni
  need /usr/bin/etcd etcd-server
  need /usr/sbin/haproxy haproxy
  # tests/gateway.rs reaches a downstream through Squid as the environment's egress proxy.
  need /usr/sbin/squid squid
fi
if ((${#missing[@]})); then
  echo "scripts/test.sh: missing system packages; install them first:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 1
fi

# A stamp per peer folder: the digest of its lock file, written after a successful install.
stamp_ok() { [[ -f $2 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$(cat "$2")" ]]; }
stamp() { sha256sum "$1" | cut -d' ' -f1 >"$2"; }

install_peers() {
  for dir in tests/peers deploy/compose/oidc; do
    local name=${dir//\//_}
    if ! stamp_ok "$dir/package-lock.json" "$peers/$name.npm" || [[ ! -d $dir/node_modules ]]; then
      echo "== test peers (npm): $dir"
      npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
      stamp "$dir/package-lock.json" "$peers/$name.npm"
    fi
  done
  # The Python peers live in their own virtual environment, first on PATH for the tests, so
  # the machine's own Python packages are neither needed nor touched.
  if ! stamp_ok tests/peers/requirements.txt "$peers/python.pip" || [[ ! -x $peers/venv/bin/python3 ]]; then
    echo "== test peers (PyPI)"
    rm -rf "$peers/venv"
    python3 -m venv "$peers/venv"
    "$peers/venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r tests/peers/requirements.txt
    stamp tests/peers/requirements.txt "$peers/python.pip"
  fi
}

# Two runs at once (two terminals, or CI and a developer) must not install over each other.
exec 9>"$peers/install.lock"
flock 9
install_peers
flock -u 9

export PATH="$peers/venv/bin:$PATH"
exec cargo test --locked --no-fail-fast "$@"
