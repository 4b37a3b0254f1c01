"""What an episode used and what it cost: token counts as the upstream reported them, a
price table, and the cost they make.

- `ModelUsage`: one model's calls and tokens over an episode, summed from each
  `model_call` record's `usage` (OpenAI's shape, which vLLM and SGLang follow):
  `prompt_tokens` (input), `completion_tokens` (output), and the parts the upstream
  broke out, `prompt_tokens_details.cached_tokens` (cached input, a part of the input)
  and `completion_tokens_details.reasoning_tokens` (a part of the output). Never an
  average: a call whose upstream reported no usage adds a call and no tokens.
- `Prices`: the spec's `prices`, USD per million input, cached-input and output
  tokens per model, and per box-second per runtime type.
- `episode_cost`: the cost of one episode's usage and box time under `Prices`.

Only pydantic and the standard library (the `episodes.types` floor): the episode
workflow sums the usage into its result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from episodes.types.base import Model

PER_TOKENS = 1_000_000  # prices are per million tokens


class ModelUsage(Model):
    """One model's calls and the tokens the upstream reported for them."""

    calls: int = 0
    input_tokens: int = 0
    """`prompt_tokens`: every input token, the cached ones included."""
    cached_tokens: int = 0
    """`prompt_tokens_details.cached_tokens`: the input tokens served from the cache."""
    output_tokens: int = 0
    """`completion_tokens`: every output token, the reasoning ones included."""
    reasoning_tokens: int = 0
    """`completion_tokens_details.reasoning_tokens`."""

    def plus(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _detail(usage: Mapping[str, Any], group: str, key: str) -> int:
    details = usage.get(group)
    return _count(details.get(key)) if isinstance(details, Mapping) else 0


def call_model(event: Mapping[str, Any]) -> str:
    """The model a call was made for: the one the proxy asked for (the spec's), else the
    one the upstream answered as, else "?"."""
    request, response = event.get("request"), event.get("response")
    for source in (request, response):
        if isinstance(source, Mapping) and isinstance(source.get("model"), str):
            return str(source["model"])
    return "?"


def usage_by_model(events: Iterable[Any]) -> dict[str, ModelUsage]:
    """The `model_call` events' usage, per model (raw dicts as recorded)."""
    out: dict[str, ModelUsage] = {}
    for e in events:
        if not isinstance(e, Mapping) or e.get("kind") != "model_call":
            continue
        usage = e.get("usage")
        usage = usage if isinstance(usage, Mapping) else {}
        one = ModelUsage(
            calls=1,
            input_tokens=_count(usage.get("prompt_tokens")),
            cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens"),
            output_tokens=_count(usage.get("completion_tokens")),
            reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        )
        name = call_model(e)
        out[name] = out[name].plus(one) if name in out else one
    return out


def merge_usage(*parts: Mapping[str, ModelUsage]) -> dict[str, ModelUsage]:
    """Usage maps added model by model (an episode's runs, a batch's episodes)."""
    out: dict[str, ModelUsage] = {}
    for part in parts:
        for name, u in part.items():
            out[name] = out[name].plus(u) if name in out else u
    return dict(sorted(out.items()))


class ModelPrice(Model):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached: float | None = Field(default=None, ge=0)
    """Cached input tokens (None: the input price)."""


class Prices(Model):
    """A price table (the spec's `prices`)."""

    models: dict[str, ModelPrice] = Field(default_factory=dict)
    """Model name (as the spec's `model.model` names it) -> its prices."""
    box_second: dict[str, float] = Field(default_factory=dict)
    """Runtime type (`subprocess`, `docker`, `modal`, `prime`) -> USD per second a box
    is held."""


class Cost(Model):
    """What an episode (or a batch: `plus`) cost, in USD."""

    model: float = 0.0
    """Its model calls: input less cached at the input price, cached at the cached
    price, output (reasoning included) at the output price."""
    box: float = 0.0
    """Its box time: the episode's duration at the runtime's price per box-second."""
    unpriced: list[str] = Field(default_factory=list)
    """Models it called that the table has no price for (their tokens cost 0 here)."""

    @property
    def total(self) -> float:
        return self.model + self.box

    def plus(self, other: Cost) -> Cost:
        return Cost(
            model=self.model + other.model,
            box=self.box + other.box,
            unpriced=sorted(set(self.unpriced) | set(other.unpriced)),
        )


def model_cost(usage: Mapping[str, ModelUsage], prices: Prices) -> Cost:
    """The cost of the model calls in `usage` (see `Cost.model`)."""
    total, unpriced = 0.0, []
    for name, u in usage.items():
        price = prices.models.get(name)
        if price is None:
            if u.input_tokens or u.output_tokens:
                unpriced.append(name)
            continue
        cached = min(u.cached_tokens, u.input_tokens)
        cached_price = price.input if price.cached is None else price.cached
        total += (
            (u.input_tokens - cached) * price.input
            + cached * cached_price
            + u.output_tokens * price.output
        ) / PER_TOKENS
    return Cost(model=total, unpriced=sorted(unpriced))


def episode_cost(
    usage: Mapping[str, ModelUsage], duration_s: float, runtime: str, prices: Prices
) -> Cost:
    """One episode's cost: its model calls, and its duration held on a box of `runtime`."""
    cost = model_cost(usage, prices)
    per_second = prices.box_second.get(runtime, 0.0)
    return cost.plus(Cost(box=max(0.0, duration_s) * per_second))
