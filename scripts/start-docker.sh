#!/usr/bin/env bash
# Make sure a Docker Engine answers on this machine.
#
# Idempotent: exits 0 at once when `docker info` already answers. Otherwise, as root,
# starts Debian's dockerd in the background with settings that work inside a VM or
# container without a configurable network or overlay support:
#   vfs storage (no overlayfs needed), no iptables, no bridge (our containers run
#   with network "none" by default anyway).
# Installs Debian's docker.io first only when EPISODES_INSTALL_DOCKER=1 (CI sets it);
# a user's `make test` never installs system packages.
set -euo pipefail

LOG=${EPISODES_DOCKERD_LOG:-/tmp/episodes-dockerd.log}
WAIT_S=${EPISODES_DOCKERD_WAIT_S:-60}

say() { echo "start-docker: $*" >&2; }

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    say "a Docker engine already answers"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    say "no Docker engine answers and this script can only start one as root."
    say "Start Docker yourself (e.g. 'sudo systemctl start docker' or Docker Desktop),"
    say "or run this script as root: sudo scripts/start-docker.sh"
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    if [[ ${EPISODES_INSTALL_DOCKER:-0} != 1 ]]; then
        say "no Docker engine answers and dockerd is not installed."
        say "Install one (Debian/Ubuntu: 'apt-get install docker.io'), or rerun with"
        say "EPISODES_INSTALL_DOCKER=1 to let this script install Debian's docker.io."
        exit 1
    fi
    say "installing Debian's docker.io (EPISODES_INSTALL_DOCKER=1)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

# If a dockerd is already starting up, this second one exits at once (it finds the
# first one's pid file) and the wait below still sees the first one answer.
say "starting dockerd (vfs storage, no iptables, no bridge); log: $LOG"
# Its own session: a Ctrl-C or the end of the calling shell must not take it down.
setsid dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none \
    >>"$LOG" 2>&1 </dev/null &

for ((i = 0; i < WAIT_S * 2; i++)); do
    if docker info >/dev/null 2>&1; then
        say "Docker engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
        exit 0
    fi
    sleep 0.5
done

say "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
