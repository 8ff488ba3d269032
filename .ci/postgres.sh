#!/usr/bin/env bash
# Start a PostgreSQL server on 127.0.0.1:5432 for the store tests; idempotent.
#
# Installs Debian's postgresql when missing, starts (or creates) a cluster,
# makes the role and database `fieldeval` (password `fieldeval`) and prints
# the export line for the store tests:
#   eval "$(.ci/postgres.sh)"
set -euo pipefail

PORT="${FIELDEVAL_PG_PORT:-5432}"
URL="postgresql://fieldeval:fieldeval@127.0.0.1:${PORT}/fieldeval"
log() { echo "postgres.sh: $*" >&2; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
fi

VERSION="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main"' | grep -q .; then
    log "creating cluster $VERSION/main"
    pg_createcluster "$VERSION" main --port "$PORT" >&2
fi
if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
    log "starting cluster $VERSION/main on 127.0.0.1:$PORT"
    pg_ctlcluster "$VERSION" main start -o "-c listen_addresses=127.0.0.1 -c port=$PORT" >&2
fi
for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p "$PORT" && break
    sleep 1
done
pg_isready -h 127.0.0.1 -p "$PORT" >&2

as_postgres psql -p "$PORT" -v ON_ERROR_STOP=1 -qtA >&2 <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'fieldeval') THEN
    CREATE ROLE fieldeval LOGIN PASSWORD 'fieldeval' CREATEDB;
  END IF;
END $$;
-- the store tests make a read-only role of their own (tests/test_upgrades.py)
ALTER ROLE fieldeval CREATEROLE;
SQL
if ! as_postgres psql -p "$PORT" -qtA -c "SELECT 1 FROM pg_database WHERE datname = 'fieldeval'" | grep -q 1; then
    as_postgres createdb -p "$PORT" -O fieldeval fieldeval
fi
PGPASSWORD=fieldeval psql "$URL" -qtA -c "SELECT 1" >/dev/null

echo "export FIELDEVAL_TEST_PG=$URL"
