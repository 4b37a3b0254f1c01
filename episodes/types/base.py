"""The base of every model that crosses the workflow boundary, and its duration type."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# The longest duration a spec or workflow input may carry: 30 days. Workflows turn
# durations into timedeltas and protobuf Durations (at most ~10,000 years), often
# multiplied (a drive's backstop is max_turns x turn_timeout_s): `inf` or 1e13 s made
# the workflow task fail for good instead of the spec being refused when read.
MAX_SECONDS = 30 * 86400.0

Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
"""A duration in seconds: finite, positive, at most MAX_SECONDS (30 days)."""

SecondsOrZero = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
"""As Seconds, where 0 means "none" (no lag, no linger)."""


class Model(BaseModel):
    """Unknown fields are errors: a misspelt key fails loudly instead of vanishing."""

    model_config = ConfigDict(extra="forbid")
