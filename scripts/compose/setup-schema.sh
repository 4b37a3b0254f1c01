#!/bin/sh
# One-shot schema step of docker-compose.yml (runs in temporalio/admin-tools).
#
# Creates the `temporal` and `temporal_visibility` databases if they are missing and
# brings both schemas to the version this admin-tools image ships. Safe to re-run:
# `setup-schema -v 0.0` only creates the version bookkeeping, and `update-schema`
# applies only the versions a database does not have yet. The server starts only
# after this exits 0 (depends_on: service_completed_successfully), so a server is
# never pointed at a half-migrated database. Keep the admin-tools tag equal to the
# server tag: the schema versions belong to the server release.
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
DB_PORT=${DB_PORT:-5432}
SCHEMA=/etc/temporal/schema/postgresql/v12

sql() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" "$@"; }

for pair in "temporal:temporal" "temporal_visibility:visibility"; do
    db=${pair%%:*}
    dir=${pair#*:}
    # `create` fails when the database exists (every run after the first); a real
    # failure (auth, network) fails setup-schema right after, so nothing is hidden.
    sql --db "$db" create || echo "setup-schema: database $db exists (or could not be created; setup-schema will tell)"
    sql --db "$db" setup-schema -v 0.0
    sql --db "$db" update-schema -d "$SCHEMA/$dir/versioned"
done
echo "setup-schema: temporal and temporal_visibility are up to date"
