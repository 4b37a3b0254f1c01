#!/usr/bin/env bash
# Build the local image `episodes-harness:latest` without any container registry.
#
#   1. A Debian rootfs (debootstrap minbase + python3) from the Debian mirror apt on
#      this machine uses; cached as a tarball under ${EPISODES_CACHE:-~/.cache/episodes}
#      so only the first build downloads anything.
#   2. The stdlib-only harness pieces appended under /opt/episodes (PYTHONPATH):
#        /opt/episodes/episodes/harness/sdk.py              the harness SDK
#        /opt/episodes/episodes/harness/reference/*.py              reference harnesses
#        /opt/episodes/episodes/tunnel/relay.py             the in-box relay (tools, model)
#        /opt/episodes/episodes/model/stream.py            SSE assembly (stdlib; the LLM harness)
#        /opt/episodes/tests/support/harnesses/*.py         test harnesses
#      With EPISODES_IMAGE_FLAVOR=agent (image `episodes-agent:latest`), also the
#      Python packages the LLM harness needs (openai, mcp) in /opt/episodes/site,
#      installed with the host's pip: a separate image, because vfs copies every byte
#      of an image per container and the plain harness image stays small.
#      Package __init__ files are empty in the image: the host package may import
#      pydantic there, the image has only the standard library.
#   3. `docker import` as one layer (vfs storage copies every layer per container, so
#      one small layer keeps container start cheap), labelled with a content hash of
#      the copied files and this script; a build whose hash matches is skipped.
#
# Needs root (debootstrap chroots) and a Docker engine (scripts/start-docker.sh).
# Overrides: EPISODES_IMAGE, EPISODES_DEBIAN_SUITE, EPISODES_DEBIAN_MIRROR, EPISODES_CACHE,
# EPISODES_FORCE_BUILD=1 (rebuild even when the hash matches), EPISODES_INSTALL_DOCKER=1
# (install debootstrap with apt when it is missing; CI sets it).
set -euo pipefail

FLAVOR=${EPISODES_IMAGE_FLAVOR:-harness}
case $FLAVOR in
    harness) IMAGE=${EPISODES_IMAGE:-episodes-harness:latest}; SITE_REQS=() ;;
    agent) IMAGE=${EPISODES_IMAGE:-episodes-agent:latest}; SITE_REQS=("openai>=1.50,<4" "mcp>=2.3,<3") ;;
    *) echo "build-image: EPISODES_IMAGE_FLAVOR must be harness or agent, not $FLAVOR" >&2; exit 2 ;;
esac
PYTHON=${EPISODES_PYTHON:-python3}  # whose pip downloads the agent packages
CACHE=${EPISODES_CACHE:-$HOME/.cache/episodes}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT=$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")
HASH_LABEL=episodes.harness.hash
START=$(date +%s.%N)

say() { echo "build-image: $*" >&2; }
die() { say "$*"; exit 1; }
elapsed() { awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found; run scripts/start-docker.sh first"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/start-docker.sh first"

# --- what goes into /opt/episodes ------------------------------------------------------
cd "$ROOT"
FILES=()
# Harness programs import only the SDK (stdlib-only); the host side of the protocol
# (episodes/harness/protocol.py and what it imports) stays out of the box.
for f in episodes/harness/sdk.py episodes/harness/reference/*.py episodes/tunnel/relay.py episodes/model/stream.py tests/support/harnesses/*.py; do
    [[ -f $f ]] || continue
    case $f in */__init__.py | */test_*.py | */conftest.py) continue ;; esac
    FILES+=("$f")
done
[[ -f episodes/harness/sdk.py ]] || die "episodes/harness/sdk.py is missing; nothing to put in the image"

# The hash covers the copied files and this script (the recipe), so editing either
# rebuilds the image and nothing else does.
HASH=$({
    for f in "${FILES[@]}"; do printf '%s\0' "$f"; cat "$f"; done
    printf '%s\0' "${SITE_REQS[@]}"
    cat "$SCRIPT"
} | sha256sum | cut -c1-16)

if [[ ${EPISODES_FORCE_BUILD:-0} != 1 ]]; then
    current=$(docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" \
        "$IMAGE" 2>/dev/null || true)
    if [[ $current == "$HASH" ]]; then
        say "$IMAGE is up to date (hash $HASH); nothing to do ($(elapsed)s)"
        exit 0
    fi
fi

[[ $(id -u) -eq 0 ]] || die "building $IMAGE needs root (debootstrap chroots); rerun as root: sudo $0"
if ! command -v debootstrap >/dev/null 2>&1; then
    [[ ${EPISODES_INSTALL_DOCKER:-0} == 1 ]] ||
        die "debootstrap is not installed; install it with 'apt-get install debootstrap'" \
            "(or rerun with EPISODES_INSTALL_DOCKER=1 to let this script install it)"
    say "installing Debian's debootstrap (EPISODES_INSTALL_DOCKER=1)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# --- the Debian mirror and suite apt uses here -------------------------------------------
suite=${EPISODES_DEBIAN_SUITE:-}
if [[ -z $suite && -r /etc/os-release ]]; then
    suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
[[ -n $suite ]] || die "cannot tell the Debian suite; set EPISODES_DEBIAN_SUITE (e.g. bookworm)"

mirror=${EPISODES_DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
    # deb822 .sources first (Debian 12 default), then one-line sources.list entries;
    # the first URI ending in /debian is the main archive (not -security, not others).
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }')
fi
if [[ -z $mirror ]]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit } }')
fi
mirror=${mirror:-http://deb.debian.org/debian}
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)

# --- the cached rootfs ------------------------------------------------------------------
INCLUDE=python3
ROOTFS_KEY=$(printf '%s|%s|%s|%s|v1' "$suite" "$mirror" "$arch" "$INCLUDE" | sha256sum | cut -c1-12)
ROOTFS_TAR=$CACHE/rootfs-$suite-$arch-$ROOTFS_KEY.tar
mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
cleanup() {
    # A debootstrap interrupted mid-way may leave /proc mounted in the chroot.
    for m in proc sys dev/pts dev; do umount -l "$WORK/rootfs/$m" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

if [[ ! -f $ROOTFS_TAR ]]; then
    say "debootstrap $suite ($arch, minbase + $INCLUDE) from $mirror; first build only"
    if ! debootstrap --variant=minbase --include="$INCLUDE" --arch="$arch" \
        "$suite" "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
        tail -n 30 "$WORK/debootstrap.log" >&2
        die "debootstrap failed (full log above); is $mirror reachable?"
    fi
    # Docs, manuals, locales and apt's caches are dead weight in a box that never
    # reads them, and vfs copies every byte per container.
    rm -rf "$WORK"/rootfs/usr/share/{doc,man,info,locale,lintian,linda}/* \
        "$WORK"/rootfs/var/cache/apt/* "$WORK"/rootfs/var/lib/apt/lists/* \
        "$WORK"/rootfs/var/cache/debconf/*-old "$WORK"/rootfs/var/log/* \
        "$WORK"/rootfs/debootstrap
    tar --numeric-owner -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
    mv "$WORK/rootfs.tar" "$ROOTFS_TAR"
    rm -rf "$WORK/rootfs"
    say "cached rootfs $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1))"
else
    say "using cached rootfs $ROOTFS_TAR"
fi

# --- append /opt/episodes and import ---------------------------------------------------
STAGE=$WORK/stage
OPT=$STAGE/opt/episodes
mkdir -p "$OPT/episodes/harness" "$OPT/episodes/harness/reference" "$OPT/episodes/model" "$OPT/episodes/tunnel" "$OPT/tests/support/harnesses"
: >"$OPT/episodes/__init__.py"
: >"$OPT/episodes/harness/__init__.py"
: >"$OPT/episodes/harness/reference/__init__.py"
: >"$OPT/episodes/model/__init__.py"
: >"$OPT/episodes/tunnel/__init__.py"
: >"$OPT/tests/__init__.py"
: >"$OPT/tests/support/__init__.py"
: >"$OPT/tests/support/harnesses/__init__.py"
for f in "${FILES[@]}"; do cp "$f" "$OPT/$f"; done
PYPATH=/opt/episodes
if ((${#SITE_REQS[@]})); then
    # Wheels only, for the box's CPython 3.11 on this architecture (the host's pip does
    # the download; the box has no pip and no network).
    say "installing ${SITE_REQS[*]} into /opt/episodes/site"
    "$PYTHON" -m pip install -q --root-user-action=ignore --disable-pip-version-check --target "$OPT/site" --only-binary=:all: --no-compile \
        --python-version 3.11 --implementation cp "${SITE_REQS[@]}" >&2 ||
        die "could not install ${SITE_REQS[*]} for the agent image"
    PYPATH=/opt/episodes:/opt/episodes/site
fi
# Bytecode, written now: the box's root filesystem is read-only and
# PYTHONDONTWRITEBYTECODE is set, so without it every harness start compiles what it
# imports from source (openai + mcp + pydantic: ~2.5 s per agent harness start on
# the agent image). Only when this Python is the box's minor version (Debian's
# 3.11): other versions' .pyc would be ignored. checked-hash: valid whatever the
# files' mtimes become.
if "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    "$PYTHON" -m compileall -q -j 0 --invalidation-mode checked-hash -d /opt/episodes "$OPT" >&2 ||
        die "could not compile /opt/episodes to bytecode"
else
    say "skipping bytecode: $PYTHON is not Python 3.11 like the box (harness starts compile from source)"
fi
chmod -R a+rX "$STAGE/opt"

# The box user (DockerConfig.user, docs/runtimes.md): `episodes`, uid/gid 10001 like the
# worker image, owning the workdir /work and its home; root stays for `user: root`.
BOX_UID=10001
mkdir -p "$STAGE/etc" "$STAGE/work" "$STAGE/home/episodes"
tar -C "$STAGE" -xf "$ROOTFS_TAR" ./etc/passwd ./etc/group
grep -q "^episodes:" "$STAGE/etc/passwd" ||
    echo "episodes:x:$BOX_UID:$BOX_UID:episodes box user:/home/episodes:/bin/sh" >>"$STAGE/etc/passwd"
grep -q "^episodes:" "$STAGE/etc/group" || echo "episodes:x:$BOX_UID:" >>"$STAGE/etc/group"
chmod 0644 "$STAGE/etc/passwd" "$STAGE/etc/group"
# Everyone's workdir: root in the box has no CAP_DAC_OVERRIDE, so `user: root` too
# needs the mode, not the owner, to write there.
chmod 0777 "$STAGE/work"
chmod 0755 "$STAGE/home/episodes"

old_id=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
cp "$ROOTFS_TAR" "$WORK/image.tar"
# Replaced, not appended twice: a tar with two ./etc/passwd is up to the extractor.
tar --delete -f "$WORK/image.tar" ./etc/passwd ./etc/group
tar --numeric-owner --owner=0 --group=0 -C "$STAGE" -rf "$WORK/image.tar" \
    ./opt/episodes ./etc/passwd ./etc/group
tar --numeric-owner --owner=$BOX_UID --group=$BOX_UID -C "$STAGE" -rf "$WORK/image.tar" \
    ./work ./home/episodes

docker import \
    --change "ENV PYTHONPATH=$PYPATH" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change "LABEL $HASH_LABEL=$HASH" \
    --change 'CMD ["sleep", "infinity"]' \
    --change 'WORKDIR /work' \
    "$WORK/image.tar" "$IMAGE" >/dev/null

# Fail here, not in a test, when the SDK cannot be imported with only the stdlib (and,
# in the agent image, when the LLM harness's packages do not import).
CHECK='import episodes.harness.sdk'
((${#SITE_REQS[@]})) && CHECK="$CHECK; import openai, mcp.client.streamable_http"
if ! out=$(docker run --rm --network none "$IMAGE" python3 -c "$CHECK" 2>&1); then
    docker rmi "$IMAGE" >/dev/null 2>&1 || true
    die "the image cannot import episodes.harness.sdk (it must be stdlib-only): $out"
fi

# The image it replaces would linger untagged (116 MB each on vfs); a container still
# using it keeps it, which is fine.
new_id=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    docker rmi "$old_id" >/dev/null 2>&1 || true
fi

size=$(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')
say "built $IMAGE (hash $HASH, $size, ${#FILES[@]} files in /opt/episodes) in $(elapsed)s"
