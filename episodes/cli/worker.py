"""`episodes worker`: logs, metrics and Worker Versioning from the settings, then poll."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from typing import Any

from episodes.cli import common
from episodes.client.config import Config

log = logging.getLogger("episodes.worker")


async def run_worker(cfg: Config) -> None:
    from activities.logs import configure_logging
    from activities.telemetry import MetricsServer, count_agent_call
    from episodes.cli.embedded import NO_SANDBOX_HINT, check_sandbox, warn_no_sandbox
    from episodes.client.connect import connect_config
    from episodes.runtimes.sandbox import cgroup
    from episodes.session.services import AgentServices
    from episodes.traces import start_tracing, stop_tracing
    from workers.collector import tune_collector
    from workers.worker import EpisodeWorker, WorkerOptions

    s = cfg.settings
    sandbox_problem = check_sandbox(s.require_sandbox, hint=NO_SANDBOX_HINT)
    warn_no_sandbox(sandbox_problem)
    configure_logging(s.log_level, s.log_format)
    AgentServices.observer = count_agent_call
    metrics: MetricsServer | None = None
    extra: dict[str, Any] = {}
    if s.metrics_port is not None:
        metrics = MetricsServer(s.metrics_port, s.metrics_host)
        extra["runtime"] = metrics.runtime
    # Before connecting: the client (and so every worker built on it) is then traced.
    traced = start_tracing("episodes-worker", instance=f"{socket.gethostname()}-{os.getpid()}")
    try:
        client = await connect_config(cfg, **extra)
        w = EpisodeWorker(
            client,
            WorkerOptions(
                task_queue=s.task_queue,
                max_sessions=s.max_sessions,
                env_threads=s.env_threads,
                session_idle_ttl_s=s.session_idle_ttl_s,
                drain_timeout_s=s.drain_timeout_s,
                provision_breaker_after=s.provision_breaker_after,
                pool_ttl_s=s.pool_ttl_s,
                pool_max_idle=s.pool_max_idle,
                pool_max_warm=s.pool_max_warm,
                box_caps=dict(s.box_caps),
                deployment_name=s.deployment_name,
                build_id=s.build_id,
                workflow_sandbox=s.workflow_sandbox,
            ),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, w.request_stop)
        version = f", build {s.deployment_name}/{s.build_id}" if s.build_id else ""
        where = f", metrics {metrics.url}" if metrics else ""
        where += ", traces on (OTEL_*)" if traced else ""
        common.console.print(
            f"worker {w.worker_id}: {cfg.describe()}, queue {s.task_queue!r}, "
            f"sessions on {w.session_queue!r}{version}{where}",
            highlight=False,
            soft_wrap=True,
        )
        log.info("worker %s started (max %d sessions)", w.worker_id, s.max_sessions)
        if sandbox_problem is None:
            # Which mode bounds the sandbox's boxes, and why: one line (docs/containment.md).
            mode = await asyncio.to_thread(cgroup.mode_line)
            common.console.print(f"sandbox: {mode}", highlight=False, soft_wrap=True)
            log.info("sandbox: %s", mode)
        tune_collector()  # start-up is done: what it made is never walked again
        await w.run()
        gone = f"; abandoned {len(w.abandoned)} session(s): {w.drain.why()}" if w.abandoned else ""
        common.console.print(
            f"worker stopped; every live harness was stopped{gone}", highlight=False
        )
    finally:
        stop_tracing()  # what is buffered leaves before the process does
        if metrics is not None:
            with contextlib.suppress(Exception):
                metrics.close()
