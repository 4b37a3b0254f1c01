#!/bin/sh
# One-shot namespace step of docker-compose.yml (runs in temporalio/admin-tools, or
# anywhere the `temporal` CLI is installed: tests/deploy runs it against a dev server).
#
# Creates $TEMPORAL_NAMESPACE (retention $TEMPORAL_NAMESPACE_RETENTION) when it does
# not exist, then registers every search attribute in $EPISODES_SEARCH_ATTRIBUTES
# ("Name=Type Name=Type ..."; the list lives in docker-compose.yml and a test keeps it
# equal to episodes/search_attributes.py). Idempotent: a re-run changes nothing and
# exits 0; an attribute that exists with another type is an error, not a skip, since
# episodes would fail to upsert it.
set -eu

ADDRESS=${TEMPORAL_ADDRESS:-temporal:7233}
NAMESPACE=${TEMPORAL_NAMESPACE:-default}
RETENTION=${TEMPORAL_NAMESPACE_RETENTION:-7d}
ATTEMPTS=${SETUP_ATTEMPTS:-30}
SLEEP_S=${SETUP_SLEEP_S:-2}
: "${EPISODES_SEARCH_ATTRIBUTES:?set EPISODES_SEARCH_ATTRIBUTES to Name=Type pairs}"

say() { echo "setup-namespace: $*"; }
t() { temporal "$@" --address "$ADDRESS"; }

# The server's port opens before its services are ready: wait for SERVING.
i=1
until t operator cluster health >/dev/null 2>&1; do
    [ "$i" -lt "$ATTEMPTS" ] || { say "server at $ADDRESS not healthy after $ATTEMPTS tries"; exit 1; }
    i=$((i + 1))
    sleep "$SLEEP_S"
done

if t operator namespace describe --namespace "$NAMESPACE" >/dev/null 2>&1; then
    say "namespace $NAMESPACE exists"
else
    t operator namespace create --namespace "$NAMESPACE" --retention "$RETENTION"
    # A new namespace takes a moment to reach every frontend's cache.
    i=1
    until t operator namespace describe --namespace "$NAMESPACE" >/dev/null 2>&1; do
        [ "$i" -lt "$ATTEMPTS" ] || { say "namespace $NAMESPACE not visible after create"; exit 1; }
        i=$((i + 1))
        sleep "$SLEEP_S"
    done
fi

# Register one attribute; 1 on a failure worth retrying. Right after a create, the
# operator API can still answer "namespace not found" for a while (its cache lags the
# one `describe` reads), so every call here is retried.
register() {
    list=$(t operator search-attribute list --namespace "$NAMESPACE") || return 1
    have=$(printf '%s\n' "$list" | awk -v n="$1" '$1 == n { print $2 }')
    if [ "$have" = "$2" ]; then
        say "search attribute $1 ($2) exists"
        return 0
    fi
    if [ -n "$have" ]; then
        say "search attribute $1 exists as $have, not $2: fix it by hand"
        exit 1
    fi
    t operator search-attribute create --namespace "$NAMESPACE" --name "$1" --type "$2" >/dev/null ||
        return 1
    say "search attribute $1 ($2) registered"
}

for pair in $EPISODES_SEARCH_ATTRIBUTES; do
    i=1
    until register "${pair%%=*}" "${pair#*=}"; do
        [ "$i" -lt "$ATTEMPTS" ] || { say "could not register $pair after $ATTEMPTS tries"; exit 1; }
        i=$((i + 1))
        sleep "$SLEEP_S"
    done
done
say "namespace $NAMESPACE ready"
