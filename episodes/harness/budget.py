"""The budgets of one harness session: what it may stream per turn and between turns.

One `StreamBudget` per session, shared by the driver (the harness's events; an ACP
agent's messages) and the agent services (tool and model calls), so a turn's budget
covers everything the worker holds for it. The driver says when a turn begins and
ends; everything charged outside a turn counts against the between-turns budget.
"""

from __future__ import annotations

from episodes.errors import ProtocolError
from episodes.types.harness import HarnessLimits


class BudgetExceeded(ProtocolError):
    """The harness streamed past a budget of `harness.limits`: the turn ends `protocol_error`."""


class StreamBudget:
    def __init__(self, limits: HarnessLimits | None = None) -> None:
        self.limits = limits or HarnessLimits()
        self.in_turn = False
        self.events = 0  # charged since the phase (a turn, or between turns) began
        self.bytes = 0
        self.requested = 0  # request bytes the model proxy took in this phase

    def begin_turn(self) -> None:
        self.in_turn, self.events, self.bytes, self.requested = True, 0, 0, 0

    def end_turn(self) -> None:
        self.in_turn, self.events, self.bytes, self.requested = False, 0, 0, 0

    def request_refusal(self, nbytes: int) -> str | None:
        """Why a request of `nbytes` would be refused (it would pass
        `turn_request_bytes`), else None; nothing is counted (a head, judged before its
        body arrives: the body is charged once it is taken in)."""
        limit = self.limits.turn_request_bytes
        if self.requested + nbytes > limit:
            where = "in one turn" if self.in_turn else "between turns"
            return (
                f"the harness sent more than {limit} request bytes {where} "
                "(harness.limits.turn_request_bytes; raise it in the spec if that is intended)"
            )
        return None

    def judge_request(self, nbytes: int) -> tuple[int, str] | None:
        """A request's head with a Content-Length of `nbytes`, before its body is read
        (the model proxy's and the tool bridge's): the HTTP status and why it is refused
        (413 alone past `turn_request_bytes`, 429 past what is left of it), else None.
        Nothing is counted: a request refused meanwhile, or abandoned before its body is
        whole, is not the turn's; `charge_request` counts the body once taken in."""
        why = self.request_refusal(nbytes)
        if why is None:
            return None
        return (413 if nbytes > self.limits.turn_request_bytes else 429), why

    def charge_request(self, nbytes: int) -> str | None:
        """Count a request's body as it is taken in; why it is refused (and not
        counted) if it would pass `turn_request_bytes`, else None. The session goes on:
        only the request is refused (HTTP 429)."""
        why = self.request_refusal(nbytes)
        if why is None:
            self.requested += nbytes
        return why

    def charge(self, nbytes: int, events: int = 1) -> None:
        """Count what arrived; raises BudgetExceeded once a budget is passed."""
        self.events += events
        self.bytes += nbytes
        phase = "turn" if self.in_turn else "between_turns"
        where = "in one turn" if self.in_turn else "between turns"
        events_limit = getattr(self.limits, f"{phase}_events")
        bytes_limit = getattr(self.limits, f"{phase}_bytes")
        if self.events > events_limit:
            raise BudgetExceeded(
                f"the harness streamed more than {events_limit} events {where} "
                f"(harness.limits.{phase}_events; raise it in the spec if that is intended)"
            )
        if self.bytes > bytes_limit:
            raise BudgetExceeded(
                f"the harness streamed more than {bytes_limit} bytes {where} "
                f"(harness.limits.{phase}_bytes; raise it in the spec if that is intended)"
            )
