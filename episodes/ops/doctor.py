"""`episodes doctor`: check a configuration end to end; `episodes setup`: fix what it can.

Each check is one line: what was found, and when something is missing, how to fix
it. Required checks decide the exit code; optional ones (a runtime nobody asked
for) are shown but do not fail. Secret values (API keys, tokens, payload keys) are
never printed: only whether they are set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType, TaskQueueKind, TaskQueueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    DescribeTaskQueueRequest,
    RegisterNamespaceRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from episodes.client.config import Config
from episodes.ops.doctor_local import (
    HARNESS_IMAGE,
    Check,
    check_payloads,
    check_runtime,
    runtime_names,
    short_error,
)
from episodes.search_attributes import CLI_TYPES

__all__ = [
    "HARNESS_IMAGE",
    "Check",
    "check_payloads",
    "check_priority",
    "check_runtime",
    "open_client",
    "run_checks",
    "runtime_names",
    "setup",
]

INDEXED = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Double": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


async def open_client(cfg: Config, timeout_s: float = 8.0) -> Client | Check:
    """A client, or the failed check saying why the server cannot be reached."""
    from temporalio.contrib.pydantic import pydantic_data_converter

    kwargs: dict[str, Any] = dict(cfg.connect_config())
    address = kwargs.pop("target_host")
    try:
        return await asyncio.wait_for(
            Client.connect(address, data_converter=pydantic_data_converter, **kwargs), timeout_s
        )
    except Exception as e:
        first = short_error(e)
        return Check(
            "server",
            False,
            f"cannot reach {address}: {first}",
            "start one (`episodes dev`) or set --address / TEMPORAL_ADDRESS / a profile"
            " (Cloud: TEMPORAL_API_KEY or --tls-cert/--tls-key)",
        )


async def check_namespace(client: Client) -> Check:
    ns = client.namespace
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=ns))
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return Check(
                "namespace", False, f"{ns!r} does not exist", "`episodes setup` creates it"
            )
        return Check("namespace", False, f"{ns!r}: {e.message}", "check the API key's permissions")
    return Check("namespace", True, f"{ns!r} exists")


async def missing_search_attributes(client: Client) -> tuple[list[str], list[str]]:
    """(missing names, names registered with another type)."""
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = dict(resp.custom_attributes)
    missing = [n for n in CLI_TYPES if n not in have]
    wrong = [n for n, t in CLI_TYPES.items() if n in have and have[n] != INDEXED[t]]
    return missing, wrong


async def check_search_attributes(client: Client) -> Check:
    try:
        missing, wrong = await missing_search_attributes(client)
    except RPCError as e:
        return Check("search attributes", False, f"cannot list them: {e.message}")
    if wrong:
        return Check(
            "search attributes",
            False,
            f"registered with another type: {', '.join(wrong)}",
            "remove them (`temporal operator search-attribute remove`) and run `episodes setup`",
        )
    if missing:
        return Check(
            "search attributes",
            False,
            f"missing {', '.join(missing)}",
            "`episodes setup` (Temporal Cloud: `tcld namespace search-attributes add`)",
        )
    return Check("search attributes", True, f"all {len(CLI_TYPES)} registered")


async def check_workers(client: Client, task_queue: str) -> Check:
    pollers = []
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=kind,
            )
        )
        pollers.append({p.identity for p in resp.pollers})
    workflow_pollers, activity_pollers = pollers
    if not workflow_pollers or not activity_pollers:
        return Check(
            "workers",
            False,
            f"no worker polls queue {task_queue!r}",
            f"start `episodes worker --task-queue {task_queue}` with this configuration",
        )
    # One worker process polls the shared queue as `<id>@shared` (workflows) and
    # `<id>@provision` (provisions): count processes, not pollers.
    names = sorted({p.rsplit("@", 1)[0] for p in workflow_pollers | activity_pollers})
    return Check("workers", True, f"{len(names)} polling {task_queue!r}: {', '.join(names[:5])}")


async def check_priority(client: Client) -> list[Check]:
    """Priority and fairness keys (batches sharing the workers), tried on a probe queue."""
    from episodes.ops.doctor_priority import probe_priority

    try:
        priority, fairness = await probe_priority(client)
    except Exception as e:
        detail = f"could not probe: {short_error(e)}"
        return [Check("priority", False, detail, required=False)]
    unsure = "the probe got no answer (a queue with several partitions mixes it up)"
    return [
        Check(
            "priority",
            bool(priority),
            "the server serves priority 1 before 5"
            if priority
            else (unsure if priority is None else "served in arrival order"),
            "a Temporal server of 1.27 or later",
            required=False,
        ),
        Check(
            "fairness",
            bool(fairness),
            "the server shares a queue between fairness keys"
            if fairness
            else (unsure if fairness is None else "served in arrival order"),
            "set the dynamic config `matching.enableFairness: true` (docs/operations/priority.md)",
            required=False,
        ),
    ]


async def run_checks(
    cfg: Config, *, runtimes: Iterable[str] = (), workers: bool = True
) -> list[Check]:
    wanted = set(runtimes)
    checks = [Check("config", True, cfg.describe())]
    client = await open_client(cfg)
    if isinstance(client, Check):
        checks.append(client)
    else:
        checks.append(Check("server", True, f"{cfg.connect_config()['target_host']} answers"))
        ns = await check_namespace(client)
        checks.append(ns)
        if ns.ok:
            checks.append(await check_search_attributes(client))
            if workers:
                checks.append(await check_workers(client, cfg.settings.task_queue))
            checks += await check_priority(client)
    for name in runtime_names():
        checks.append(await asyncio.to_thread(check_runtime, name, name in wanted))
    checks += await check_payloads()
    return checks


async def setup(client: Client, *, retention: timedelta = timedelta(days=7)) -> list[str]:
    """Create the namespace when missing and register missing search attributes."""
    done = []
    ns = client.namespace
    if not (await check_namespace(client)).ok:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace=ns, workflow_execution_retention_period=_duration(retention)
            )
        )
        done.append(f"created namespace {ns!r}")
        for _ in range(50):  # a new namespace takes a moment to answer everywhere
            if (await check_namespace(client)).ok:
                break
            await asyncio.sleep(0.2)
    missing, wrong = await missing_search_attributes(client)
    if wrong:
        from episodes.errors import EpisodesError

        raise EpisodesError(f"search attributes registered with another type: {', '.join(wrong)}")
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=ns, search_attributes={n: INDEXED[CLI_TYPES[n]] for n in missing}
            )
        )
        done.append(f"registered search attributes {', '.join(missing)}")
    return done


def _duration(value: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(value)
    return d
