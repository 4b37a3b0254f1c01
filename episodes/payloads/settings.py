"""Where every process gets its payload settings: the one seam clients, workers and tools share.

Today the settings come from EPISODES_PAYLOADS_* / EPISODES_S3_* / EPISODES_PAYLOAD_KEYS*
variables (`payloads_config_from_env`). A settings file (the production config) plugs in
HERE, in `payloads_config`, and nowhere else: `connect()`, the worker, `episodes dev`,
`episodes show`, the codec server and the test replayers all call this module, so
they all agree on storage and keys (a worker without them fails tasks with TMPRL1105).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from temporalio.converter import DataConverter

from episodes.payloads.config import (
    LocalStorage,
    NoStorage,
    PayloadsConfig,
    S3Storage,
    payloads_config_from_env,
)
from episodes.payloads.converter import data_converter

# `episodes dev` / `make demo` keep their state here (episodes.cli.embedded.STATE_DIR).
DEV_STATE_DIR = Path(".episodes")

StorageDefault = NoStorage | LocalStorage | S3Storage


def dev_storage(state_dir: Path = DEV_STATE_DIR) -> LocalStorage:
    """The embedded stack's default: content-addressed files under `<state_dir>/payloads/`."""
    return LocalStorage(path=state_dir / "payloads")


def existing_dev_storage(state_dir: Path = DEV_STATE_DIR) -> LocalStorage | None:
    """`dev_storage` when its directory exists: what readers (`episodes show`, the codec
    server) default to, so histories `episodes dev` wrote resolve with no settings."""
    local = dev_storage(state_dir)
    return local if local.path.is_dir() else None


def payloads_config(
    *, default_storage: StorageDefault | None = None, environ: Mapping[str, str] | None = None
) -> PayloadsConfig:
    """The payload settings of this process (the environment; later also a settings file).

    `default_storage` applies only when EPISODES_PAYLOADS_STORAGE is unset.
    """
    return payloads_config_from_env(environ, default_storage=default_storage)


def configured_data_converter(
    *, default_storage: StorageDefault | None = None, environ: Mapping[str, str] | None = None
) -> DataConverter:
    """`data_converter(payloads_config(...))`: what `connect()` uses when given none."""
    return data_converter(
        payloads_config(default_storage=default_storage, environ=environ), environ=environ
    )


def stores_externally(converter: DataConverter) -> bool:
    """Whether large payloads leave the history (so a turn may be recorded whole)."""
    return converter.external_storage is not None
