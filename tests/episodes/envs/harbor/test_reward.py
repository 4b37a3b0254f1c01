"""A Harbor verifier's reward is a finite number, or the episode ends `env_error` naming
the file and the value: read by the real env from a real box (the local one, with the
verifier directory moved under tmp_path), no Docker needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.envs.harbor import env as harbor_env
from episodes.envs.harbor.env import HarborEnv
from episodes.runtimes.box import Box
from episodes.runtimes.subprocess import SubprocessRuntime
from episodes.types.runtime import SubprocessConfig


@pytest.fixture
async def verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harbor_env, "VERIFIER_DIR", str(tmp_path))
    runtime = SubprocessRuntime(SubprocessConfig(isolation="none"))
    await runtime.start()

    async def read(name: str, raw: bytes) -> dict:
        for old in tmp_path.glob("reward.*"):
            old.unlink()
        (tmp_path / name).write_bytes(raw)
        return await HarborEnv()._reward(Box(runtime))

    try:
        yield read
    finally:
        await runtime.stop()


@pytest.mark.parametrize(
    ("raw", "reward"),
    [(b"1\n", 1.0), (b" 0.5 ", 0.5), (b"-2", -2.0), (b"1e-3\n", 0.001), (b"0", 0.0), (b".5", 0.5)],
)
async def test_a_decimal_number_in_reward_txt_is_the_reward(verdict, raw, reward) -> None:
    assert await verdict("reward.txt", raw) == {"reward": reward}


@pytest.mark.parametrize(
    "raw",
    [b"nan", b"NaN", b"inf", b"-inf", b"Infinity", b"1_0", b"1e999", b"0x1", b"", b"one", b"\xff"],
)
async def test_reward_txt_that_is_not_a_finite_number_is_an_env_error(verdict, raw) -> None:
    with pytest.raises(ValueError, match=r"reward\.txt") as caught:
        await verdict("reward.txt", raw)
    shown = raw.decode(errors="replace").strip()
    assert shown[:10] in str(caught.value) or raw == b"\xff", caught.value


@pytest.mark.parametrize(
    ("raw", "reward"),
    [
        (b'{"reward": 1, "correct": true}', 1.0),
        (b'{"accuracy": 0.25, "passed": false}', 0.25),  # a bool is not its only number
        (b'{"reward": 0.5, "detail": {"n": 3}}', 0.5),
    ],
)
async def test_reward_json_numbers(verdict, raw, reward) -> None:
    assert (await verdict("reward.json", raw))["reward"] == reward


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b'{"reward": true}', "True"),
        (b'{"passed": true}', None),  # no number at all: no reward, not True == 1.0
        (b'{"reward": NaN}', "NaN"),
        (b'{"reward": Infinity}', "Infinity"),
        (b'{"reward": -Infinity}', "-Infinity"),
        (b'{"reward": 1e999}', "1e999"),
        (b'{"reward": 0.5, "other": NaN}', "NaN"),
        (b'{"reward": "1"}', "'1'"),
        (b"[1]", "[1]"),
    ],
)
async def test_reward_json_without_a_finite_reward_is_not_a_score(verdict, raw, named) -> None:
    if named is None:
        got = await verdict("reward.json", raw)
        assert got["reward"] is None, got
        return
    with pytest.raises(ValueError, match=r"reward\.json") as caught:
        await verdict("reward.json", raw)
    assert named in str(caught.value), caught.value
