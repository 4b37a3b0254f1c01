"""The base of every model that crosses the workflow boundary."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Unknown fields are errors: a misspelt key fails loudly instead of vanishing."""

    model_config = ConfigDict(extra="forbid")
