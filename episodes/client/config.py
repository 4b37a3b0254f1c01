"""One configuration for every command: flags > environment > config file > defaults.

Two halves, one rule:

- **Temporal connection** (address, namespace, API key, TLS) is the SDK's own
  `temporalio.envconfig`: profiles in a TOML file (`[profile.NAME]`), overridden by
  `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
  chosen by `TEMPORAL_PROFILE`; command-line flags override what it resolved.
- **This project's settings** (`Settings`): an `[episodes]` table in the same file,
  overridden by `EPISODES_<NAME>` variables, overridden by flags.

The file: `--config` > `EPISODES_CONFIG_FILE` > `TEMPORAL_CONFIG_FILE` >
`./episodes.toml` when it exists > the SDK's default location (its profiles only).
Errors are one line naming the setting and where it came from, never its value
(an API key must not reach a terminal or a log).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS, ClientConnectConfig

from episodes.envs.base import DEFAULT_ENV_THREADS
from episodes.errors import ConfigError
from episodes.types.runtime import BoxCap, parse_box_caps
from episodes.types.tuning import DEFAULT_TASK_QUEUE

LOCAL_FILE = Path("episodes.toml")
DEFAULT_ADDRESS = "127.0.0.1:7233"


class Settings(BaseModel):
    """This project's settings (`EPISODES_<NAME>`, `[episodes]` NAME, `--name`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_queue: str = Field(DEFAULT_TASK_QUEUE, min_length=1)
    """The shared queue; each worker's session queue is `<task_queue>-session-<worker>`."""
    max_sessions: int = Field(256, ge=1)
    env_threads: int = Field(DEFAULT_ENV_THREADS, ge=1)
    """Sync env calls (reset, step, score, plain tools) a worker runs at once, each on a
    thread so a blocking rubric does not freeze the other sessions; more wait."""
    session_idle_ttl_s: float = Field(3600.0, gt=0)
    drain_timeout_s: float = Field(30.0, ge=0)
    """On SIGTERM/SIGINT: how long live sessions may finish before they are abandoned."""
    provision_breaker_after: int = Field(3, ge=0)
    """Provisions failing in a row with the runtime unavailable (no engine, SDK or
    credentials) before the worker pauses taking provisions (0: never pause)."""
    pool_ttl_s: float = Field(600.0, gt=0)
    """The longest a spec's pool may keep an idle box on this worker (a cap)."""
    pool_max_idle: int = Field(16, ge=0)
    """The most idle boxes one pool may keep on this worker (a cap)."""
    pool_max_warm: int = Field(16, ge=0)
    """The most warm boxes (a spec's `pool.warm`) this worker keeps per box config (a
    cap; 0: none)."""
    box_caps: Annotated[dict[str, BoxCap], BeforeValidator(parse_box_caps)] = Field(
        default_factory=dict
    )
    """Per runtime type, the most boxes this worker starts at once (`starting`) and
    holds at once (`running`): `modal.starting=64,docker.running=32`, or a table
    (`box_caps = {docker = {running = 32}}`). Over the defaults (Modal: 128 starting);
    `none` lifts one. Past a cap a provision waits (docs/runtimes.md, "Caps")."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    deployment_name: str | None = Field(None, min_length=1)
    build_id: str | None = Field(None, min_length=1)
    workflow_sandbox: bool = False
    """Run the workflows in the Temporal SDK's sandbox (slower; they are checked in it
    by the test suite either way)."""
    require_sandbox: bool = True
    """A worker that cannot make bubblewrap sandboxes (the default runtime) refuses to
    start, with the reason; false starts it anyway (its specs use other runtimes)."""

    @model_validator(mode="before")
    @classmethod
    def _upper_level(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("log_level"), str):
            data = {**data, "log_level": data["log_level"].upper()}
        return data

    @model_validator(mode="after")
    def _versioning_pair(self) -> Settings:
        if (self.deployment_name is None) != (self.build_id is None):
            raise ValueError("set both deployment_name and build_id (Worker Versioning) or neither")
        return self


SETTINGS = tuple(Settings.model_fields)


def env_var(name: str) -> str:
    return f"EPISODES_{name.upper()}"


# Flags that are not their setting's name with dashes (as they shipped).
_FLAGS = {"session_idle_ttl_s": "--session-idle-ttl", "pool_ttl_s": "--pool-ttl"}


def flag(name: str) -> str:
    """A setting's command-line flag, as every command declares it (`episodes.cli.common`),
    so an error names a flag that exists."""
    return _FLAGS.get(name) or "--" + name.replace("_", "-")


@dataclass(frozen=True)
class TemporalFlags:
    """Connection flags; None means "not given" (the environment or the file decides)."""

    address: str | None = None
    namespace: str | None = None
    api_key: str | None = None
    tls: bool | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_server_name: str | None = None


@dataclass(frozen=True)
class Config:
    settings: Settings
    temporal: ClientConfigProfile
    file: Path | None
    profile: str

    @property
    def address(self) -> str | None:
        return self.temporal.address

    @property
    def namespace(self) -> str:
        return self.temporal.namespace or "default"

    def connect_config(self, *, default_address: str | None = None) -> ClientConnectConfig:
        """`Client.connect` keyword arguments (reads the TLS files named by the config).

        With no address configured: `default_address`, else this checkout's running dev
        server (`.episodes/server.json`, wherever its ports are), else 127.0.0.1:7233."""
        profile = self.temporal
        if not profile.address:
            profile = replace(profile, address=default_address or local_default_address())
        try:
            cfg = profile.to_client_connect_config()
        except OSError as e:
            raise ConfigError(f"TLS: cannot read {e.filename}: {e.strerror}") from None
        cfg.setdefault("namespace", "default")
        return cfg

    def describe(self) -> str:
        """Where we connect and how, without secret values."""
        how = []
        if self.temporal.api_key:
            how.append("API key")
        tls = self.temporal.tls
        if tls is not None and tls.disabled is not True:
            how.append("mTLS" if tls.client_cert else "TLS")
        elif self.temporal.api_key:
            how.append("TLS")
        src = f", config {self.file}" if self.file else ""
        auth = f" ({', '.join(how)})" if how else ""
        return f"{self.address or local_default_address()} namespace {self.namespace!r}{auth}{src}"


def local_default_address() -> str:
    """This checkout's running dev server (`episodes dev`), else 127.0.0.1:7233."""
    from episodes.client.devstate import local_address

    return local_address() or DEFAULT_ADDRESS


def config_file(flag_path: Path | None, env: Mapping[str, str]) -> Path | None:
    if flag_path is not None:
        where, path = "--config", flag_path
    elif env.get("EPISODES_CONFIG_FILE"):
        where, path = "EPISODES_CONFIG_FILE", Path(env["EPISODES_CONFIG_FILE"])
    elif env.get("TEMPORAL_CONFIG_FILE"):
        where, path = "TEMPORAL_CONFIG_FILE", Path(env["TEMPORAL_CONFIG_FILE"])
    elif LOCAL_FILE.is_file():
        return LOCAL_FILE
    else:
        return None
    path = path.expanduser()
    if not path.is_file():
        raise ConfigError(f"{where}: {path}: no such file")
    return path


def _episodes_table(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    table = data.get("episodes", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [episodes] must be a table")
    return table


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key, value in _episodes_table(file).items():
        merged[key], source[key] = value, f"{file} [episodes] {key}"
    for name in SETTINGS:
        raw = env.get(env_var(name), "").strip()
        if raw:
            merged[name], source[name] = raw, env_var(name)
    for name, value in (flags or {}).items():
        if value is not None:
            merged[name], source[name] = value, flag(name)
    pair = [k for k in ("deployment_name", "build_id") if merged.get(k) is not None]
    if len(pair) == 1:
        other = ({"deployment_name", "build_id"} - set(pair)).pop()
        raise ConfigError(
            f"{source[pair[0]]}: Worker Versioning needs {env_var(other)} (or {flag(other)}) too"
        )
    try:
        return Settings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        where = source.get(key) or (f"{file} [episodes] {key}" if key else "settings")
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{where}: {msg}") from None


def load_temporal(
    flags: TemporalFlags,
    *,
    profile: str | None,
    file: Path | None,
    environ: Mapping[str, str] | None = None,
) -> tuple[ClientConfigProfile, str]:
    env = dict(os.environ if environ is None else environ)
    name = profile or env.get("TEMPORAL_PROFILE") or "default"
    if file is None:
        env.pop("TEMPORAL_CONFIG_FILE", None)  # resolved above; None means the SDK default
    try:
        loaded = ClientConfigProfile.load(
            profile if profile else None, config_source=file, override_env_vars=env
        )
    except RuntimeError as e:  # the SDK core's ConfigError: a bad file or an unknown profile
        first = str(e).splitlines()[0]
        where = (
            "--profile"
            if profile
            else ("TEMPORAL_PROFILE" if "TEMPORAL_PROFILE" in env else "profile")
        )
        if "not found" in first:
            raise ConfigError(f"{where}: {first} in {file or 'the default config file'}") from None
        raise ConfigError(f"{file or 'temporal config'}: {first}") from None
    tls = loaded.tls
    if any(
        v is not None for v in (flags.tls_cert, flags.tls_key, flags.tls_ca, flags.tls_server_name)
    ):
        tls = replace(
            tls or ClientConfigTLS(),
            client_cert=flags.tls_cert or (tls.client_cert if tls else None),
            client_private_key=flags.tls_key or (tls.client_private_key if tls else None),
            server_root_ca_cert=flags.tls_ca or (tls.server_root_ca_cert if tls else None),
            server_name=flags.tls_server_name or (tls.server_name if tls else None),
        )
    if flags.tls is not None:
        tls = replace(tls or ClientConfigTLS(), disabled=not flags.tls)
    for path, opt in (
        (flags.tls_cert, "--tls-cert"),
        (flags.tls_key, "--tls-key"),
        (flags.tls_ca, "--tls-ca"),
    ):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{opt}: {path}: no such file")
    if bool(tls and tls.client_cert) != bool(tls and tls.client_private_key):
        raise ConfigError("TLS: a client certificate needs its key and a key its certificate")
    return (
        replace(
            loaded,
            address=flags.address or loaded.address,
            namespace=flags.namespace or loaded.namespace,
            api_key=flags.api_key or loaded.api_key,
            tls=tls,
        ),
        name,
    )


def load_config(
    temporal: TemporalFlags | None = None,
    settings: Mapping[str, Any] | None = None,
    *,
    config: Path | None = None,
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Resolve everything once: what a command connects to and how it behaves."""
    env = os.environ if environ is None else environ
    file = config_file(config, env)
    prof, name = load_temporal(temporal or TemporalFlags(), profile=profile, file=file, environ=env)
    return Config(load_settings(settings, file=file, environ=env), prof, file, name)
