"""Large payloads out of the history (external storage) and payload encryption (AES-GCM).

`data_converter(config)` is the one entry point clients, workers and replayers use;
`payloads_config_from_env()` builds the config from EPISODES_* variables;
`episodes.payloads.codec_server` serves /encode and /decode for the Temporal UI and CLI.
"""

from episodes.errors import PayloadDecryptError, PayloadKeyError, PayloadsConfigError
from episodes.payloads.codec import AesGcmCodec
from episodes.payloads.config import (
    DEFAULT_THRESHOLD_BYTES,
    AesGcmEncryption,
    LocalStorage,
    NoEncryption,
    NoStorage,
    PayloadsConfig,
    S3Storage,
    payloads_config_from_env,
)
from episodes.payloads.converter import aclose, data_converter
from episodes.payloads.local import LocalDirectoryDriver, prune_local_payloads

__all__ = [
    "DEFAULT_THRESHOLD_BYTES",
    "AesGcmCodec",
    "AesGcmEncryption",
    "LocalDirectoryDriver",
    "LocalStorage",
    "NoEncryption",
    "NoStorage",
    "PayloadDecryptError",
    "PayloadKeyError",
    "PayloadsConfig",
    "PayloadsConfigError",
    "S3Storage",
    "aclose",
    "data_converter",
    "payloads_config_from_env",
    "prune_local_payloads",
]
