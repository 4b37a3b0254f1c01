"""One word per meaning (issue 27): `batch_id` names a batch in the client as
`--batch-id` does in the CLI; `--on-server` runs it as one EvalBatchWorkflow. The old
spellings (`batch=`, `--batch`) still work, with a deprecation warning."""

from __future__ import annotations

import uuid

import pytest

from episodes.client import EpisodesClient
from episodes.client.batch.server import batch_input
from episodes.errors import EpisodesError
from tests.episodes.cli.test_cli import episodes, good_spec, write_spec
from tests.support.helpers import spec

QUEUE = "episodes-test"


def test_batch_input_takes_batch_id_and_the_old_spelling_warns() -> None:
    s = spec(name="names")
    assert batch_input(s, batch_id="b1").batch == "b1"
    with pytest.warns(DeprecationWarning, match=r"batch_input\(batch=...\) is deprecated"):
        assert batch_input(s, batch="b2").batch == "b2"
    with pytest.raises(EpisodesError, match="give one"):
        batch_input(s, batch_id="b1", batch="b2")


async def test_run_batch_takes_batch_id_and_the_old_spelling_warns(client, worker) -> None:
    s = spec(name=f"names-{uuid.uuid4().hex[:6]}")
    ec = EpisodesClient(client, task_queue=QUEUE)
    [r] = [r async for r in ec.run_batch(s, batch_id=f"{s.name}-new")]
    assert r.workflow_id == f"{s.name}-new.t0.s0"
    with pytest.warns(DeprecationWarning, match=r"run_batch\(batch=...\) is deprecated"):
        stream = ec.run_batch(s, batch=f"{s.name}-old")
    [r] = [r async for r in stream]
    assert r.workflow_id == f"{s.name}-old.t0.s0"
    with pytest.warns(DeprecationWarning, match="use batch_id"):
        r = await ec.run_episode(s, s.tasks[0], batch=f"{s.name}-one")
    assert r.workflow_id == f"{s.name}-one.t0.s0"


@pytest.mark.parametrize("flag", ["--on-server", "--batch"])
async def test_on_server_and_its_deprecated_spelling(tmp_path, dev_server, worker, flag) -> None:
    name = f"srv-{uuid.uuid4().hex[:6]}"
    path = write_spec(tmp_path, good_spec(name))
    code, stdout, stderr = await episodes(
        "run", str(path), "--address", dev_server.address, "--task-queue", QUEUE,
        flag, "--batch-id", f"{name}-id",
    )  # fmt: skip
    assert code == 0, stdout + stderr
    assert f"batch workflow batch.{name}-id" in stdout  # the server's batch, named so
    deprecated = "--batch is deprecated: use --on-server" in stderr
    assert deprecated == (flag == "--batch"), stderr
