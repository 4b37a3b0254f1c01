"""A session's secrets: read on the worker when the session starts, scrubbed from its record.

A spec names its secrets (`harness.secrets: {NAME: {env: HOST_VAR} | {file: PATH}}`);
only those references travel in workflow inputs and history. `resolve_secrets` reads
the values on the worker, `Scrubber` replaces every known value (these and the model
proxy's upstream key) with `***` in whatever the episode records: replies, events,
errors, a harness's stderr tail. Errors name the secret and the variable or file,
never a value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from episodes.errors import SecretMissing
from episodes.types.harness import EnvSecret
from episodes.types.spec import EpisodeSpec

MASK = "***"
# Values shorter than this are not scrubbed: replacing every "a" would wreck the
# transcript, and such a value protects nothing. (docs/operations/secrets.md.)
MIN_SCRUB_CHARS = 4

M = TypeVar("M", bound=BaseModel)


def resolve_secrets(spec: EpisodeSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NAME -> value for `spec.harness.secrets`, read now, on this worker."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name, ref in spec.harness.secrets.items():
        where = f"harness.secrets.{name}"
        if isinstance(ref, EnvSecret):
            value = env.get(ref.env)
            if not value:
                raise SecretMissing(
                    f"{where}: environment variable {ref.env} is not set on the worker"
                )
        else:
            path = Path(ref.file).expanduser()
            try:
                value = path.read_text()
            except OSError as e:
                raise SecretMissing(
                    f"{where}: cannot read file {ref.file} on the worker: {e.strerror}"
                ) from None
            except UnicodeDecodeError:
                raise SecretMissing(f"{where}: file {ref.file} is not UTF-8 text") from None
            value = value.removesuffix("\n").removesuffix("\r")
            if not value:
                raise SecretMissing(f"{where}: file {ref.file} is empty")
        values[name] = value
    return values


class Scrubber:
    """Replaces known secret values with `***` in strings, JSON-like values and models."""

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        # Longest first: a secret that contains another is masked whole.
        self.values = sorted(
            {v for v in values if v and len(v) >= MIN_SCRUB_CHARS}, key=len, reverse=True
        )

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def value(self, value: Any) -> Any:
        if not self.values:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    def model(self, model: M) -> M:
        """The model with every string inside it scrubbed (itself when nothing matched)."""
        if not self.values:
            return model
        data = model.model_dump(mode="json")
        clean = self.value(data)
        return model if clean == data else type(model).model_validate(clean)
