"""`episodes compare` on real batches run on the test dev server: one pair with a known
difference, one without, each verdict far from the edge (exact sign-flip p-values).

The env is `script` with the echo harness: a task's reward is 1 when its `expected`
equals its messages, else 0, so each batch's rewards are set by its tasks' data."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.episodes.cli.test_cli import episodes, write_spec

TASKS = 12


def spec(name: str, passing: set[int], **extra: object) -> dict:
    return {
        "name": name,
        "env": "script",
        "tasks": [
            {
                "id": f"t{i:02d}",
                "data": {"messages": ["hi"], "expected": ["hi" if i in passing else "no"]},
            }
            for i in range(TASKS)
        ],
        "harness": {"command": "{python} -m episodes.harness.reference.echo"},
        **extra,
    }


async def run(tmp_path: Path, address: str, data: dict, *flags: str) -> str:
    path = write_spec(tmp_path, data, name=f"{data['name']}.yaml")
    code, _, stderr = await episodes(
        "run",
        str(path),
        "--address",
        address,
        "--task-queue",
        "episodes-test",
        *flags,
        timeout=240,
    )
    assert code == 0, stderr
    return data["name"]


async def compare(address: str, a: str, b: str, *flags: str) -> tuple[str, str]:
    code, stdout, stderr = await episodes("compare", a, b, "--address", address, *flags)
    assert code == 0, stderr
    return stdout, stderr


async def test_compare_tells_a_real_difference_from_none(tmp_path, dev_server, worker) -> None:
    tag = uuid.uuid4().hex[:6]
    address = dev_server.address
    # A: 3 of 12 tasks pass. B: all 12 (and a spec pinned differently: a warning).
    # C: 3 of 12 too, but t00 fails and t03 passes instead (run on the server).
    a = await run(tmp_path, address, spec(f"cmp-a-{tag}", {0, 1, 2}))
    b = await run(tmp_path, address, spec(f"cmp-b-{tag}", set(range(TASKS)), turn_timeout_s=45))
    c = await run(tmp_path, address, spec(f"cmp-c-{tag}", {1, 2, 3}), "--on-server")

    # A vs B: nine tasks differ by +1, three by 0. The exact test: of the 2^9 sign
    # assignments of the nine, only all-plus and all-minus reach |9|: p = 2/512.
    stdout, _ = await compare(address, a, b, "--json")
    verdict = json.loads(stdout)
    assert verdict["difference"] == 0.75
    assert verdict["p_value"] == 2 / 512
    assert verdict["significant"] is True
    assert verdict["paired_tasks"] == TASKS
    low, high = verdict["interval"]
    assert 0 < low < 0.75 < high <= 1
    assert [f["task"] for f in verdict["flipped"]] == [f"t{i:02d}" for i in range(3, TASKS)]
    assert all(f["a"] is False and f["b"] is True for f in verdict["flipped"])
    assert verdict["a"]["mean_reward"]["value"] == 0.25
    assert verdict["b"]["pass_rate"]["value"] == 1.0
    # What the manifests pinned: the same runtime and package, a different spec.
    ma, mb = verdict["manifests"]["a"], verdict["manifests"]["b"]
    assert ma["runtime"] == mb["runtime"] == "subprocess" and ma["package"] == mb["package"]
    assert any(w.startswith("different spec_hash: A ") for w in verdict["warnings"])

    stdout, stderr = await compare(address, a, b)
    assert "beyond the noise" in stdout and "+0.750" in stdout
    assert "flipped: 9 of 12 tasks (75%): 9 fail → pass, 0 pass → fail" in stdout
    assert "t03: fail → pass" in stdout
    assert "warning: different spec_hash: A " in stderr

    # A vs C: t00 lost, t03 gained: differences +1 and -1 sum to 0, every assignment
    # reaches it: p = 1. The same spec (C ran as a batch workflow: its memo), no warning.
    stdout, _ = await compare(address, a, c, "--json")
    verdict = json.loads(stdout)
    assert verdict["difference"] == 0.0 and verdict["p_value"] == 1.0
    assert verdict["significant"] is False
    assert verdict["flipped"] == [
        {"task": "t00", "a": True, "b": False},
        {"task": "t03", "a": False, "b": True},
    ]
    assert verdict["warnings"] == []
    assert verdict["manifests"]["b"]["spec_hash"] == verdict["manifests"]["a"]["spec_hash"]

    stdout, stderr = await compare(address, a, c)
    assert "within the noise" in stdout and "t00: pass → fail" in stdout
    assert "warning" not in stderr


async def test_compare_names_a_batch_that_does_not_exist(dev_server) -> None:
    code, _, stderr = await episodes(
        "compare", "no-such-batch-x", "no-such-batch-y", "--address", dev_server.address
    )
    assert code == 2
    assert "no-such-batch-x" in stderr and "no episodes found" in stderr
