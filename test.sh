#!/usr/bin/env sh
# Runs ffd's whole test suite, after making sure the programs the tests
# start are on this machine: PostgreSQL's server binaries (every test
# binary starts a private cluster), PgBouncer (TestThroughPgBouncer),
# Chromium (the console's browser tests), and Python 3 with psycopg 3 and
# Node.js with npm (the clients in clients/, whose packages `npm ci`
# fetches). None of those tests skips when its program is missing, so a
# missing one would fail the run.
#
#   ./test.sh                 install what is missing (asking before sudo), then test
#   ./test.sh --yes           the same, without asking
#   ./test.sh --install       only install what is missing
#   ./test.sh -- -run TestX   pass the rest to `go test` (the packages stay ./...)
#
# Each package may take up to 60 minutes (go test's -timeout; its
# default of 10 is too short on a machine whose every core is busy).
#
# On Debian and Ubuntu it installs the missing ones with apt-get: directly
# as root, through sudo after asking otherwise. Elsewhere it names what to
# install and stops. .ci/run calls this script.
set -eu
cd "$(dirname "$0")"

yes=0
install_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --yes | -y) yes=1 ;;
    --install) install_only=1 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $1 (see ./test.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "test.sh: $*" >&2; }

# The same places internal/pgserver looks, in its order.
have_postgres() {
  if [ -n "${FFD_PG_BIN_DIR:-}" ] && [ -x "$FFD_PG_BIN_DIR/initdb" ]; then return 0; fi
  if command -v pg_config >/dev/null 2>&1; then
    bindir=$(pg_config --bindir 2>/dev/null || true)
    if [ -n "$bindir" ] && [ -x "$bindir/initdb" ]; then return 0; fi
  fi
  for d in /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /opt/homebrew/opt/postgresql@*/bin /usr/local/opt/postgresql@*/bin; do
    if [ -x "$d/initdb" ]; then return 0; fi
  done
  command -v initdb >/dev/null 2>&1
}
have_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
have_psycopg() {
  for p in "${FFD_PYTHON:-}" python3 /usr/bin/python3; do
    if [ -n "$p" ] && "$p" -c 'import psycopg' >/dev/null 2>&1; then return 0; fi
  done
  return 1
}
have_node() { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }
have_chromium() {
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}

os_id=unknown
if [ -r /etc/os-release ]; then
  os_id=$(. /etc/os-release && echo "${ID:-unknown} ${ID_LIKE:-}")
fi
case "$(uname -s)" in Darwin) os_id=macos ;; esac

# missing: the programs absent; debs: their Debian/Ubuntu packages.
missing=""
debs=""
if ! have_postgres; then missing="$missing postgresql-server"; debs="$debs postgresql"; fi
if ! have_pgbouncer; then missing="$missing pgbouncer"; debs="$debs pgbouncer"; fi
if ! have_psycopg; then missing="$missing psycopg"; debs="$debs python3-psycopg"; fi
if ! have_node; then missing="$missing node"; debs="$debs nodejs npm"; fi
if ! have_chromium; then
  missing="$missing chromium"
  case "$os_id" in
    ubuntu*) debs="$debs chromium-browser" ;; # Ubuntu's is a snap behind this package
    *) debs="$debs chromium" ;;
  esac
fi

if [ -n "$missing" ]; then
  say "missing:$missing"
  case "$os_id" in
    *debian* | *ubuntu*)
      sudo=""
      if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
          say "run as root: apt-get install -y --no-install-recommends$debs"
          exit 1
        fi
        sudo="sudo"
        if [ "$yes" != 1 ]; then
          if [ ! -t 0 ]; then
            say "not a terminal, so not asking: run ./test.sh --yes, or sudo apt-get install -y --no-install-recommends$debs"
            exit 1
          fi
          printf 'test.sh: install%s with sudo apt-get? [y/N] ' "$debs" >&2
          read -r answer
          case "$answer" in
            y | Y | yes | YES) ;;
            *) say "not installed; the tests need them: sudo apt-get install -y --no-install-recommends$debs"; exit 1 ;;
          esac
        fi
      fi
      say "installing$debs with apt-get"
      # shellcheck disable=SC2086 # $debs is a list of words
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
      # shellcheck disable=SC2086
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $debs
      case "$debs" in
        *pgbouncer*)
          # Debian starts a system-wide PgBouncer; the tests run their own.
          $sudo systemctl disable --now pgbouncer >/dev/null 2>&1 ||
            $sudo service pgbouncer stop >/dev/null 2>&1 || true
          ;;
      esac
      ;;
    macos)
      say "install them with Homebrew: brew install postgresql@17 pgbouncer node psycopg && brew install --cask chromium (or pip3 install psycopg)"
      exit 1
      ;;
    *fedora* | *rhel* | *centos*)
      say "install them: the PGDG postgresql17-server (or postgresql-server), pgbouncer, chromium, python3-psycopg3 and nodejs packages (dnf install postgresql-server pgbouncer chromium python3-psycopg3 nodejs npm)"
      exit 1
      ;;
    *)
      say "install PostgreSQL 14 or newer (server binaries: initdb, postgres), PgBouncer, Chromium (or Google Chrome), Python 3 with psycopg 3 and Node.js with npm, then run ./test.sh again"
      exit 1
      ;;
  esac
fi

# The TypeScript client's packages, as its package-lock.json pins them.
if [ ! -d clients/typescript/node_modules ] || [ clients/typescript/package-lock.json -nt clients/typescript/node_modules ]; then
  say "installing clients/typescript's packages with npm ci"
  (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error)
fi

if [ "$install_only" = 1 ]; then
  say "PostgreSQL, PgBouncer, Chromium, psycopg, Node.js and the TypeScript client's packages are here"
  exit 0
fi
# go test gives each package 10 minutes by default; on a machine whose
# every core is busy (a shared CI host) the root package alone took
# longer. 60 minutes a package is generous, and named: a package that
# runs out of it panics with "test timed out after 1h0m0s". A -timeout
# of the caller's, passed after --, wins.
exec go test -race -count=1 -timeout 60m "$@" ./...
