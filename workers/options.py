"""How a worker is set up: its options, and how it runs the workflows (versioning, the
sandbox, their bytecode). `workers.worker` imports these names as before.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import UnsandboxedWorkflowRunner, WorkerDeploymentConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from episodes.envs.base import DEFAULT_ENV_THREADS
from episodes.types.runtime import BoxCap
from episodes.types.tuning import DEFAULT_TASK_QUEUE

log = logging.getLogger("episodes.worker")


@dataclass
class WorkerOptions:
    task_queue: str = DEFAULT_TASK_QUEUE
    max_sessions: int = 256
    # Sync env code (reset/step/score, plain tools) running at once, each on a thread
    # off the event loop (episodes/envs/base.py); more waits for a thread.
    env_threads: int = DEFAULT_ENV_THREADS
    # A session nobody has touched for this long is stopped (its workflow is stuck or gone).
    session_idle_ttl_s: float = 3600.0
    reap_interval_s: float = 30.0
    max_concurrent_workflow_tasks: int = 100
    # `await_episode` (a re-run batch waiting for an existing episode) in flight at once.
    max_side_activities: int = 1000
    graceful_shutdown_s: float = 5.0
    # How long a workflow task waits on this worker's sticky queue before any worker
    # may take it. A lost worker's workflows wait this long too before they can notice
    # the loss, so it adds to worker_lost detection (SDK default: 10 s).
    sticky_timeout_s: float = 2.0
    # On stop (SIGTERM): how long live sessions may run on before they are abandoned.
    drain_timeout_s: float = 30.0
    # Provisions in a row that find the runtime unavailable before this worker pauses
    # taking provisions (episodes/breaker.py); 0: never pause.
    provision_breaker_after: int = 3
    worker_id: str | None = None
    # Caps on what specs ask of this worker's box pools (None: the spec decides).
    pool_ttl_s: float | None = None
    pool_max_idle: int | None = None
    pool_max_warm: int | None = None
    # Per runtime type: the most boxes starting and held at once (over DEFAULT_BOX_CAPS;
    # episodes/runtimes/caps.py). Past one a provision waits, and the worker stops
    # taking provisions while one does.
    box_caps: dict[str, BoxCap] = field(default_factory=dict)
    # Worker Versioning (both or neither): docs/operations/drain.md.
    deployment_name: str | None = None
    build_id: str | None = None
    # Run the workflows in the SDK's sandbox; off, they run as plain code (see
    # `workflow_runner`).
    workflow_sandbox: bool = False


def deployment_config(opts: WorkerOptions) -> WorkerDeploymentConfig | None:
    """Worker Versioning for the shared-queue worker, or None (unversioned).

    Every workflow is pinned: an episode's session lives in this process, so its
    workflow finishes on the build that provisioned it. (EvalBatchWorkflow could
    auto-upgrade, but a `versioning_behavior` on its defn makes unversioned workers
    fail its tasks, so it stays pinned: the old build serves a batch to its end.)
    """
    if opts.deployment_name is None or opts.build_id is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(
            deployment_name=opts.deployment_name, build_id=opts.build_id
        ),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """How the worker runs this package's workflows.

    The SDK's sandbox imports a workflow's modules afresh for every workflow run and
    enters itself again for each payload's serialization context: a quarter of the
    worker's CPU per episode and 5-23 ms of a 1-turn episode (bench/README.md, issue
    22). These workflows are this package's own code, not a user's: they import only
    models (tests/test_layering.py), keep no module state, and the sandbox still
    checks them where it catches what it exists for, replaying the saved histories
    (tests/workflows/test_replay.py) and in the workflow-logic tests. `workflow_sandbox`
    turns it back on for a worker.
    """
    return SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()


def precompile_workflows() -> None:
    """Write the workflow modules' bytecode if it is missing or stale.

    The sandbox imports a workflow's modules afresh for every workflow run. Without
    their .pyc (PYTHONDONTWRITEBYTECODE=1, a fresh editable checkout) every run
    compiled them from source: ~18% of the worker's main-thread CPU in the throughput
    benchmark (issue 13). Python still reads bytecode under PYTHONDONTWRITEBYTECODE. A
    read-only tree is left as it is (an installed package has its .pyc already).
    """
    import importlib.util
    import py_compile
    from pathlib import Path

    import workflows

    for path in Path(workflows.__file__).parent.glob("*.py"):
        cfile = importlib.util.cache_from_source(str(path))
        try:
            if os.path.exists(cfile) and os.stat(cfile).st_mtime >= path.stat().st_mtime:
                continue
            py_compile.compile(str(path), cfile=cfile, doraise=True)
        except (OSError, py_compile.PyCompileError) as e:
            log.debug("no bytecode for %s: %s", path, e)


def seconds(s: float) -> timedelta:
    return timedelta(seconds=s)
