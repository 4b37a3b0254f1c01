"""`episodes.connect()` resolves the connection as the CLI does: arguments >
TEMPORAL_* / EPISODES_* variables > the config file's profile > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

import episodes


def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_PROFILE", "TEMPORAL_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(empty))
    monkeypatch.delenv("EPISODES_TASK_QUEUE", raising=False)


async def test_the_environment_is_used(dev_server, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server.address)
    monkeypatch.setenv("EPISODES_TASK_QUEUE", "from-env")
    client = await episodes.connect(timeout_s=30)
    assert client.task_queue == "from-env"
    assert client.client.service_client.config.target_host == dev_server.address


async def test_arguments_beat_the_environment(dev_server, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _clean(monkeypatch, tmp_path)
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("EPISODES_TASK_QUEUE", "from-env")
    client = await episodes.connect(dev_server.address, task_queue="from-arg", timeout_s=30)
    assert client.task_queue == "from-arg"


async def test_a_profile_in_the_config_file(dev_server, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _clean(monkeypatch, tmp_path)
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.lab]\naddress = "{dev_server.address}"\nnamespace = "default"\n'
        '[episodes]\ntask_queue = "from-file"\n'
    )
    client = await episodes.connect(config_file=config, profile="lab", timeout_s=30)
    assert client.task_queue == "from-file"
    assert client.client.namespace == "default"


async def test_an_unreachable_server_is_one_clear_line(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _clean(monkeypatch, tmp_path)
    with pytest.raises(
        episodes.ServerUnreachable, match=r"cannot reach Temporal at 127\.0\.0\.1:1 "
    ):
        await episodes.connect("127.0.0.1:1", timeout_s=0.5)
