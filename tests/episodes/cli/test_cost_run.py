"""Cost in a real run: each result's `cost` under the spec's price table, `episodes run`'s
summary (a client-side batch and a batch workflow), and a budget given in cost."""

from __future__ import annotations

import json
import uuid

import pytest

from episodes.words import usd
from tests.episodes.cli.test_cli import episodes, write_spec

# A box-second of the subprocess runtime at $1,000: one episode spends any small budget.
PRICES = {"box_second": {"subprocess": 1000.0}}


def _spec(name: str, **extra: object) -> dict:
    return {
        "name": name,
        "env": "script",
        "tasks": [{"id": f"t{i}", "data": {"messages": ["x"]}} for i in range(4)],
        "harness": {"command": ["{python}", "-m", "episodes.harness.reference.echo"]},
        "concurrency": 1,
        "prices": PRICES,
        **extra,
    }


@pytest.mark.parametrize("server_batch", [False, True], ids=["client", "batch-workflow"])
async def test_cost_in_results_the_summary_and_a_budget(
    tmp_path, dev_server, worker, server_batch
) -> None:
    flags = ["--address", dev_server.address, "--task-queue", "episodes-test"]
    flags += ["--on-server"] if server_batch else []
    name = f"cost-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "results.jsonl"
    path = write_spec(tmp_path, _spec(name))
    code, stdout, stderr = await episodes("run", str(path), *flags, "--out", str(out))
    assert code == 0, stdout + stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4
    for r in rows:
        # The box time at the runtime's price; no model: no model cost, no usage.
        assert r["cost"]["box"] == pytest.approx(r["duration_s"] * 1000.0)
        assert r["cost"]["model"] == 0.0 and r["usage"] == {}
    total = sum(r["cost"]["box"] for r in rows)
    assert f"{usd(total)} (models $0, boxes {usd(total)})" in stdout.replace("\n", " ")

    # A budget in cost, in the spec (client) or as a flag (batch workflow): past it no
    # episode starts.
    if server_batch:
        budgeted = write_spec(tmp_path, _spec(f"{name}-b"), name="budgeted.yaml")
        code, stdout, stderr = await episodes("run", str(budgeted), *flags, "--max-cost", "0.001")
    else:
        data = _spec(f"{name}-b", budget={"max_cost": 0.001})
        budgeted = write_spec(tmp_path, data, name="budgeted.yaml")
        code, stdout, stderr = await episodes("run", str(budgeted), *flags)
    assert code == 0, stdout + stderr
    assert "budget_exhausted: max_cost reached; 1 of 4 episodes ran" in stdout
