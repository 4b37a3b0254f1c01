#!/bin/sh
# The worker image's entrypoint: give the worker a cgroup subtree of its own, then run
# `episodes worker` as EPISODES_WORKER_USER (docs/operations/deploy.md#cgroups).
#
# The sandbox bounds a box's memory, processes and CPU with a cgroup per box where the
# worker can make one ("cgroup mode"), and with rlimits and a watch where it cannot
# (docs/containment.md). A container's /sys/fs/cgroup is read-only and root's, so a
# worker that starts as uid 10001 is in rlimits mode. Started as root (compose:
# `user: "0:0"`, `cap_add: [SYS_ADMIN]`), this script does what systemd's `Delegate=yes`
# and Docker-in-Docker's entrypoint do, inside the container's own cgroup namespace:
#
#   1. a cgroup namespace rooted at the container's cgroup (`unshare --cgroup` when the
#      engine shares the host's: cgroup v1 hosts by default), so /proc/self/cgroup and
#      the /sys/fs/cgroup mount agree;
#   2. that mount made writable for this container only (`mount -o remount,bind,rw`:
#      CAP_SYS_ADMIN; skipped where the runtime mounts it writable already);
#   3. cgroup v2: every process moved from the namespace's root into the leaf `worker`
#      (the kernel's "no internal processes" rule), then memory, pids and cpu enabled
#      for the root's children; the worker makes its boxes' cgroups beside `worker`.
#      cgroup v1: the worker makes them in its own memory, pids and cpu cgroups;
#   4. the root's directory and its cgroup.procs, cgroup.threads (tasks on v1) and
#      cgroup.subtree_control chowned to the worker's user, as systemd delegates;
#   5. `setpriv` to that user with no capabilities left, not even in the bounding set,
#      and no_new_privs: nothing the worker or a harness runs can get root back.
#
# Any step that fails is said once (EPISODES_CGROUP_DELEGATION: the worker's start line
# and `episodes doctor` repeat it) and the worker starts anyway, in rlimits mode. Not
# root, or EPISODES_WORKER_USER unset: the worker runs as it is, nothing is changed.
set -eu

CG=/sys/fs/cgroup
USER_ID=${EPISODES_WORKER_USER:-}

say() { echo "episodes-entrypoint: $*" >&2; }
first_line() { printf '%s\n' "$1" | head -n 1; }

start_worker() {
    if [ -n "$USER_ID" ] && [ "$(id -u)" = 0 ]; then
        HOME=$(getent passwd "$USER_ID" | cut -d: -f6)
        export HOME="${HOME:-/}"
        # The container's supplementary groups but root's stay the worker's: compose's
        # group_add (the engine socket's group, docker-compose.docker-runtime.yml).
        groups=$(id -G | tr ' ' '\n' | grep -vx 0 | paste -sd, -)
        keep=--clear-groups
        if [ -n "$groups" ]; then keep=--groups=$groups; fi
        exec setpriv --reuid="$USER_ID" --regid="$USER_ID" "$keep" \
            --inh-caps=-all --bounding-set=-all --no-new-privs -- episodes worker "$@"
    fi
    exec episodes worker "$@"
}

# not_delegated WHY [worker args...]
not_delegated() {
    export EPISODES_CGROUP_DELEGATION="not delegated: $1"
    shift
    say "$EPISODES_CGROUP_DELEGATION; the sandbox bounds its boxes by rlimits"
    start_worker "$@"
}

if [ -z "$USER_ID" ] || [ "$(id -u)" != 0 ]; then
    start_worker "$@"
fi
case $USER_ID in
    *[!0-9]*) say "EPISODES_WORKER_USER must be a numeric uid, not $USER_ID"; exit 2 ;;
esac

# Where this process sits, by hierarchy: "0::/x" (v2) or "4:memory:/x" (v1).
own() { awk -F: -v c="$1" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) { print $3; exit } } $2 == c { print $3; exit }' /proc/self/cgroup; }

if [ -f $CG/cgroup.controllers ]; then
    VERSION=2
    HIER="$CG"
    path=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
else
    VERSION=1
    HIER="$CG/memory $CG/pids $CG/cpu"
    path=$(own memory)
fi

# 1. Our own cgroup namespace, once (the re-exec'd script finds itself at its root).
if [ "$path" != / ] && [ -z "${EPISODES_ENTRYPOINT_UNSHARED:-}" ]; then
    export EPISODES_ENTRYPOINT_UNSHARED=1
    if unshare --cgroup true 2>/dev/null; then
        exec unshare --cgroup "$0" "$@"
    fi
    not_delegated "this container shares the host's cgroup namespace and cannot make its own (unshare --cgroup needs CAP_SYS_ADMIN)" "$@"
fi
for h in $HIER; do
    if [ ! -f "$h/cgroup.procs" ] || ! grep -qx "$$" "$h/cgroup.procs" 2>/dev/null; then
        not_delegated "$h is not this container's cgroup (no cgroup namespace of its own)" "$@"
    fi
done

# 2. Writable, for this container only.
for h in $HIER; do
    if ! touch "$h/cgroup.procs" 2>/dev/null; then
        if ! err=$(mount -o remount,bind,rw "$h" 2>&1); then
            not_delegated "$h is read-only and remounting it read-write failed ($(first_line "$err"); it needs CAP_SYS_ADMIN: compose cap_add: [SYS_ADMIN])" "$@"
        fi
    fi
done

# 3. and 4. (`|| return`, not set -e: errexit does not hold in an `if`'s condition)
prepare_v2() {
    mkdir -p $CG/worker || return 1
    # Every process of the root (docker-init, this script) into the leaf; one that exits
    # meanwhile is no error.
    while read -r pid; do
        echo "$pid" >$CG/worker/cgroup.procs 2>/dev/null || true
    done <$CG/cgroup.procs
    for c in memory pids cpu; do
        grep -qw $c $CG/cgroup.controllers || { echo "no $c controller in $CG/cgroup.controllers"; return 1; }
    done
    echo "+memory +pids +cpu" >$CG/cgroup.subtree_control || return 1
    chown "$USER_ID:$USER_ID" $CG $CG/cgroup.procs $CG/cgroup.threads $CG/cgroup.subtree_control \
        $CG/worker $CG/worker/cgroup.procs $CG/worker/cgroup.threads $CG/worker/cgroup.subtree_control
}

if [ $VERSION = 2 ]; then
    if ! err=$(prepare_v2 2>&1); then
        not_delegated "preparing $CG failed: $(first_line "$err")" "$@"
    fi
else
    for h in $HIER; do
        if ! err=$(chown "$USER_ID:$USER_ID" "$h" "$h/cgroup.procs" "$h/tasks" 2>&1); then
            not_delegated "chown of $h failed: $(first_line "$err")" "$@"
        fi
    done
fi
export EPISODES_CGROUP_DELEGATION="delegated by the image's entrypoint (cgroup v$VERSION, uid $USER_ID)"
say "$EPISODES_CGROUP_DELEGATION"
start_worker "$@"
