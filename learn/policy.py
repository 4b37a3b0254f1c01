"""The policy: a softmax over a tiny vocabulary of number tokens, in float64 numpy.

The vocabulary is the numbers 1..N (each one token: its decimal text, id by the chat
template's tokenizer, `episodes.model.scripted.chat_template`) and the stop token `<|im_end|>`.
The model reads the conversation as token ids, the way a language model would, and
keeps from it only the feasible interval [lo, hi]: the range the env announced
(`{"low": 1, "high": N, ...}`) narrowed by each of its own guesses and the feedback
after it (`"higher"`, `"lower"`). A number token's logit is one weight per *category*
of that number: outside the interval, or in bin k of B equal bins of its relative
position in the interval. After a number the stop token follows with probability 1.

All zero weights are random play (uniform over 1..N); bisection is a large weight on
the middle bin. The server samples with these functions and the trainer recomputes
them from the recorded ids, in the same float64 arithmetic, so the two agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from episodes.model.scripted.chat_template import END, SPECIALS, piece_id, tokenize

END_ID = SPECIALS[END]


@dataclass(frozen=True)
class Vocab:
    """The ids the policy reads and writes, for numbers 1..n."""

    n: int = 31
    bins: int = 7
    number_ids: tuple[int, ...] = field(init=False)
    value_of: dict[int, int] = field(init=False)
    low_key: int = field(init=False)
    high_key: int = field(init=False)
    higher: int = field(init=False)
    lower: int = field(init=False)

    def __post_init__(self) -> None:
        ids = tuple(piece_id(str(v)) for v in range(1, self.n + 1))
        if len(set(ids)) != self.n or END_ID in ids:
            raise ValueError(f"number tokens 1..{self.n} collide in the tokenizer")
        set_ = object.__setattr__
        set_(self, "number_ids", ids)
        set_(self, "value_of", {i: v for v, i in enumerate(ids, 1)})
        # The env's JSON as the chat template tokenizes it (json.dumps' separators).
        set_(self, "low_key", piece_id('{"low":'))
        set_(self, "high_key", piece_id(' "high":'))
        set_(self, "higher", piece_id(' "higher",'))
        set_(self, "lower", piece_id(' "lower",'))

    @property
    def size(self) -> int:
        """Number of weights: one per category (outside, then the bins)."""
        return self.bins + 1

    def text(self, token: int) -> str:
        return END if token == END_ID else str(self.value_of[token])


def _bound_values(vocab: Vocab) -> dict[int, int]:
    """Ids of the pieces ` 7,` (a bound in the env's first message) -> 7."""
    return {piece_id(f" {v},"): v for v in range(0, vocab.n + 2)}


def interval(vocab: Vocab, ids: Sequence[int]) -> tuple[int, int]:
    """The feasible interval the conversation `ids` leaves (lo > hi: none left)."""
    bounds = _BOUNDS.get(vocab.n) or _BOUNDS.setdefault(vocab.n, _bound_values(vocab))
    lo, hi, last = 1, vocab.n, None
    prev = None
    for t in ids:
        if prev == vocab.low_key and t in bounds:
            lo = bounds[t]
        elif prev == vocab.high_key and t in bounds:
            hi = bounds[t]
        elif t in vocab.value_of:
            last = vocab.value_of[t]
        elif t == vocab.higher and last is not None:
            lo = max(lo, last + 1)
        elif t == vocab.lower and last is not None:
            hi = min(hi, last - 1)
        prev = t
    return lo, hi


_BOUNDS: dict[int, dict[int, int]] = {}


def features(vocab: Vocab, lo: int, hi: int) -> np.ndarray:
    """One-hot category per number 1..n: shape (n, bins + 1)."""
    values = np.arange(1, vocab.n + 1)
    inside = (values >= lo) & (values <= hi)
    span = max(hi - lo, 1)
    rel = (values - lo) / span if hi > lo else np.full(vocab.n, 0.5)
    bins = np.minimum((rel * vocab.bins).astype(int), vocab.bins - 1) + 1
    cat = np.where(inside, bins, 0)
    return np.eye(vocab.size)[cat]


def number_logprobs(vocab: Vocab, weights: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """log pi(number | interval) for numbers 1..n, float64."""
    logits = features(vocab, lo, hi) @ weights.astype(np.float64)
    logits = logits - logits.max()
    return logits - np.log(np.exp(logits).sum())


def token_logprob(vocab: Vocab, weights: np.ndarray, context: Sequence[int], token: int) -> float:
    """The policy's logprob of `token` after the token ids `context`."""
    if context and context[-1] in vocab.value_of:  # after a number: the stop token
        return 0.0 if token == END_ID else float("-inf")
    if token not in vocab.value_of:
        return float("-inf")
    lo, hi = interval(vocab, context)
    return float(number_logprobs(vocab, weights, lo, hi)[vocab.value_of[token] - 1])


def sample(
    vocab: Vocab, weights: np.ndarray, prompt: Sequence[int], rng: np.random.Generator
) -> tuple[list[int], list[float]]:
    """One completion after `prompt`: a number token then the stop token, with logprobs."""
    lo, hi = interval(vocab, prompt)
    lps = number_logprobs(vocab, weights, lo, hi)
    k = int(rng.choice(vocab.n, p=np.exp(lps)))
    return [vocab.number_ids[k], END_ID], [float(lps[k]), 0.0]


def grad_logprob(
    vocab: Vocab, weights: np.ndarray, context: Sequence[int], token: int
) -> np.ndarray:
    """d log pi(token | context) / d weights (zero for the stop token)."""
    if token not in vocab.value_of:
        return np.zeros(vocab.size)
    lo, hi = interval(vocab, context)
    phi = features(vocab, lo, hi)
    probs = np.exp(number_logprobs(vocab, weights, lo, hi))
    return phi[vocab.value_of[token] - 1] - probs @ phi


def prompt_ids(messages: list[dict[str, object]]) -> list[int]:
    """Helper for tests: a conversation's prompt ids, as the server's template makes them."""
    from episodes.model.scripted.chat_template import ChatTemplate

    return [piece_id(p) for p in ChatTemplate().prompt(messages, [])]


__all__ = ["END_ID", "Vocab", "grad_logprob", "interval", "sample", "token_logprob", "tokenize"]
