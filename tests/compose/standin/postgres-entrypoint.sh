#!/usr/bin/env bash
# Stand-in for the official Postgres image's entrypoint: on an empty data directory, create the
# cluster with POSTGRES_USER (superuser, POSTGRES_PASSWORD) and POSTGRES_DB; then run the server as
# the postgres user, listening on all addresses of the container with password auth.
set -euo pipefail
if [[ "${1:-}" != postgres ]]; then exec "$@"; fi
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 0700 "$PGDATA"
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [[ "$db" != postgres ]]; then
    as_postgres postgres --single -D "$PGDATA" postgres <<<"CREATE DATABASE \"$db\" OWNER \"$user\";" >/dev/null
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*'
