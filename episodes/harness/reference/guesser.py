"""Guesser harness: bisects its way to the `guess-number` env's secret.

    python -m episodes.harness.reference.guesser

The first message carries the range (`{"low": 1, "high": 100, ...}`); later ones only
say "higher", "lower" or "invalid". The narrowed range therefore lives only in this
process's memory: the harness works only if the same process serves every turn.
Each guess streams an `event` with the range and the reasoning before the reply.

Speaks the harness wire protocol on stdin/stdout (run it under a host, e.g.
`command: "{python} -m episodes.harness.reference.guesser"`); stdlib + `episodes.harness.sdk` only.
"""

from __future__ import annotations

from typing import Any

from episodes.harness import sdk


class Bisector:
    def __init__(self) -> None:
        self.lo: int | None = None
        self.hi: int | None = None
        self.last: int | None = None

    def handle(self, turn: int, message: Any, emit: Any) -> int:
        if not isinstance(message, dict):
            raise ValueError(f"expected a JSON object, got {type(message).__name__}")
        feedback = message.get("feedback")
        if "low" in message and "high" in message:
            # A fresh range: the start of a game.
            self.lo, self.hi = int(message["low"]), int(message["high"])
            why = f"new game over [{self.lo}, {self.hi}]"
        elif self.lo is None or self.hi is None or self.last is None:
            raise RuntimeError("got feedback before any range: this process missed turn 0")
        elif feedback == "higher":
            self.lo = self.last + 1
            why = f"{self.last} was too low"
        elif feedback == "lower":
            self.hi = self.last - 1
            why = f"{self.last} was too high"
        else:
            why = f"feedback {feedback!r} on {self.last}; trying again"
        if self.lo > self.hi:
            raise RuntimeError(f"inconsistent feedback: range [{self.lo}, {self.hi}] is empty")
        self.last = (self.lo + self.hi) // 2
        emit({"guess": self.last, "low": self.lo, "high": self.hi, "reasoning": why})
        return self.last


def main() -> None:
    sdk.serve(Bisector().handle)


if __name__ == "__main__":
    main()
