#!/usr/bin/env bash
# Build the worker image `episodes-worker:test` from the repository's Dockerfile, from a
# LOCAL base: no container registry is asked for anything (tests/deploy/test_worker_image.py).
#
#   1. The base `episodes-worker-base:local`: the harness image's Debian bookworm rootfs
#      (scripts/build-image.sh: debootstrap + `docker import`, Python 3.11 from Debian)
#      with python3-venv added and the harness pieces and box user taken out, so it
#      stands where the Dockerfile's `python:3.11-slim-bookworm` does.
#   2. `docker build --build-arg BASE=episodes-worker-base:local` of the Dockerfile, as a
#      user would build it (pip installs the package from PyPI, apt installs bubblewrap
#      from Debian), with the host's network (dockerd may run with --bridge=none).
#
# Both are labelled with a content hash (the Dockerfile, the entrypoint, the package's
# sources, pyproject.toml and this script; the base image's id); a build whose hash
# matches is skipped. Needs the harness image (scripts/build-image.sh) and network
# access to Debian's mirror and to PyPI (or the index pip is configured with).
# Overrides: EPISODES_WORKER_IMAGE, EPISODES_FORCE_BUILD=1.
set -euo pipefail

IMAGE=${EPISODES_WORKER_IMAGE:-episodes-worker:test}
BASE=episodes-worker-base:local
FROM=episodes-harness:latest
HASH_LABEL=episodes.worker.hash
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT=$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")
START=$(date +%s.%N)

say() { echo "build-worker-image: $*" >&2; }
die() { say "$*"; exit 1; }
elapsed() { awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
label() { docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$1" 2>/dev/null || true; }

docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/start-docker.sh first"
from_id=$(docker image inspect --format '{{.Id}}' "$FROM" 2>/dev/null) ||
    die "$FROM is missing: build it first (scripts/build-image.sh)"

cd "$ROOT"
# --- 1. the base -------------------------------------------------------------------
BASE_HASH=$(printf '%s|%s|%s' "$from_id" "$(sha256sum </etc/ssl/certs/ca-certificates.crt 2>/dev/null || true)" "$(sed -n '/[B]ASE-RECIPE-START/,/[B]ASE-RECIPE-END/p' "$SCRIPT")" |
    sha256sum | cut -c1-16)
if [[ ${EPISODES_FORCE_BUILD:-0} == 1 || $(label "$BASE") != "$BASE_HASH" ]]; then
    say "building $BASE from $FROM (python3-venv from Debian)"
    # BASE-RECIPE-START
    # The host's CA bundle goes in as the base's: where an intercepting proxy answers for
    # PyPI (its CA trusted on the host only), pip in the build would refuse it otherwise.
    CTX=$(mktemp -d)
    trap 'rm -rf "$CTX"' EXIT
    cat >"$CTX/Dockerfile" <<DOCKERFILE
FROM $FROM
ENV PYTHONPATH= PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /
RUN userdel episodes && (groupdel episodes 2>/dev/null || true) \\
    && rm -rf /opt/episodes /work /home/episodes \\
    && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \\
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
CMD ["python3"]
DOCKERFILE
    if [[ -r /etc/ssl/certs/ca-certificates.crt ]]; then
        cp /etc/ssl/certs/ca-certificates.crt "$CTX/host-ca.crt"
        printf '%s\n' 'COPY host-ca.crt /etc/ssl/certs/host-ca.crt' \
            'ENV PIP_CERT=/etc/ssl/certs/host-ca.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt' \
            >>"$CTX/Dockerfile"
    fi
    docker build --network host -t "$BASE" --label "$HASH_LABEL=$BASE_HASH" "$CTX" >&2
    # BASE-RECIPE-END
fi
base_id=$(docker image inspect --format '{{.Id}}' "$BASE")

# --- 2. the worker image, from the Dockerfile -----------------------------------------
HASH=$({
    printf '%s\0' "$base_id"
    git ls-files -z Dockerfile .dockerignore deploy/worker/ pyproject.toml README.md episodes workflows activities workers |
        sort -z | while IFS= read -r -d '' f; do
            [[ -f $f ]] || continue
            printf '%s\0' "$f"
            cat "$f"
        done
    cat "$SCRIPT"
} | sha256sum | cut -c1-16)
if [[ ${EPISODES_FORCE_BUILD:-0} != 1 && $(label "$IMAGE") == "$HASH" ]]; then
    say "$IMAGE is up to date (hash $HASH); nothing to do ($(elapsed)s)"
    exit 0
fi
old_id=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
say "building $IMAGE from the Dockerfile (BASE=$BASE)"
docker build --network host --build-arg "BASE=$BASE" --label "$HASH_LABEL=$HASH" \
    -t "$IMAGE" . >&2
new_id=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    docker rmi "$old_id" >/dev/null 2>&1 || true
fi
# The build stage's intermediate images are dangling once tagged images exist: vfs keeps
# a full copy per layer, so they go.
docker image prune -f --filter "label=$HASH_LABEL" >/dev/null 2>&1 || true
size=$(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')
say "built $IMAGE (hash $HASH, $size) in $(elapsed)s"
