"""One precedence rule on the SDK's envconfig: flags > environment > file > defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from episodes.client.config import TemporalFlags, load_config
from episodes.errors import ConfigError

FILE = """
[profile.default]
address = "file-host:7233"
namespace = "file-ns"

[profile.cloud]
address = "acct.tmprl.cloud:7233"
namespace = "acct.ns"
api_key = "file-secret-key"

[episodes]
task_queue = "file-queue"
max_sessions = 7
log_format = "json"
"""


@pytest.fixture
def cfg_file(tmp_path: Path) -> Path:
    p = tmp_path / "episodes.toml"
    p.write_text(FILE)
    return p


def test_defaults_without_file_or_env(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./episodes.toml
    c = load_config(environ={"HOME": str(tmp_path)})
    assert c.file is None and c.address is None and c.namespace == "default"
    assert c.settings.task_queue == "episodes" and c.settings.max_sessions == 256
    assert c.connect_config()["target_host"] == "127.0.0.1:7233"


def test_file_then_env_then_flags(cfg_file) -> None:
    env = {"EPISODES_CONFIG_FILE": str(cfg_file)}
    c = load_config(environ=env)
    assert (c.address, c.namespace) == ("file-host:7233", "file-ns")
    assert (c.settings.task_queue, c.settings.max_sessions, c.settings.log_format) == (
        "file-queue",
        7,
        "json",
    )
    env |= {"TEMPORAL_ADDRESS": "env-host:1", "EPISODES_MAX_SESSIONS": "5"}
    c = load_config(environ=env)
    assert (c.address, c.namespace) == ("env-host:1", "file-ns")
    assert (c.settings.task_queue, c.settings.max_sessions) == ("file-queue", 5)
    c = load_config(
        TemporalFlags(address="flag-host:2", namespace="flag-ns"),
        {"max_sessions": 3, "task_queue": None},
        environ=env,
    )
    assert (c.address, c.namespace) == ("flag-host:2", "flag-ns")
    assert (c.settings.task_queue, c.settings.max_sessions) == ("file-queue", 3)


def test_profiles_api_key_and_tls(cfg_file, tmp_path) -> None:
    env = {"TEMPORAL_CONFIG_FILE": str(cfg_file), "TEMPORAL_PROFILE": "cloud"}
    c = load_config(environ=env)
    kw = c.connect_config()
    assert kw["target_host"] == "acct.tmprl.cloud:7233" and kw["api_key"] == "file-secret-key"
    assert kw["tls"] is True  # an API key alone turns TLS on (Temporal Cloud)
    assert "file-secret-key" not in c.describe() and "API key" in c.describe()
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("CERT")
    key.write_text("KEY")
    c = load_config(TemporalFlags(tls_cert=cert, tls_key=key), profile="default", environ=env)
    tls = c.connect_config()["tls"]
    assert tls.client_cert == b"CERT" and tls.client_private_key == b"KEY"  # type: ignore[union-attr]
    assert "mTLS" in c.describe()
    envtls = {"TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert), "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key)}
    tls = load_config(environ={**env, **envtls}).connect_config()["tls"]
    assert tls.client_cert == b"CERT"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("env", "flags", "needle"),
    [
        (
            {"EPISODES_MAX_SESSIONS": "lots"},
            {},
            "EPISODES_MAX_SESSIONS: Input should be a valid integer",
        ),
        ({}, {"log_format": "xml"}, "--log-format: Input should be 'text' or 'json'"),
        (
            {"EPISODES_BUILD_ID": "b1"},
            {},
            "EPISODES_BUILD_ID: Worker Versioning needs EPISODES_DEPLOYMENT_NAME",
        ),
        (
            {"EPISODES_CONFIG_FILE": "/nonexistent.toml"},
            {},
            "EPISODES_CONFIG_FILE: /nonexistent.toml: no such file",
        ),
        ({"TEMPORAL_PROFILE": "nope"}, {}, "TEMPORAL_PROFILE: Profile 'nope' not found"),
    ],
)
def test_errors_are_one_line_naming_the_setting(cfg_file, env, flags, needle) -> None:
    env = {"TEMPORAL_CONFIG_FILE": str(cfg_file), **env}
    with pytest.raises(ConfigError) as e:
        load_config(settings=flags, environ=env)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_key_in_the_episodes_table(tmp_path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[episodes]\nmax_sesions = 3\n")
    with pytest.raises(ConfigError, match=r"bad.toml \[episodes\] max_sesions: Extra inputs"):
        load_config(config=p, environ={})


async def test_connect_to_the_dev_server_through_a_profile_file(tmp_path, dev_server) -> None:
    from episodes.client.connect import connect_config

    p = tmp_path / "temporal.toml"
    p.write_text(f'[profile.dev]\naddress = "{dev_server.address}"\nnamespace = "default"\n')
    env = {**os.environ, "TEMPORAL_CONFIG_FILE": str(p), "TEMPORAL_PROFILE": "dev"}
    env.pop("TEMPORAL_ADDRESS", None)
    client = await connect_config(load_config(environ=env), timeout_s=30)
    assert client.service_client.config.target_host == dev_server.address
    assert (await client.count_workflows()).count >= 0
