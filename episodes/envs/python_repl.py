"""`python-repl`: sends Python snippets, one per turn, and checks the printed output.

    task.data = {"snippets": ["x = 20", "y = x + 1", "print(x * y)"],
                 "expected": ["", "", "420"]}                          # expected optional

The harness (e.g. `{python} -m episodes.harness.reference.repl`) replies with the snippet's
output as the interactive interpreter shows it: stdout, the repr of a final expression,
or the traceback text. The point is state: `x` from turn 1 is visible in turn 3
only because the harness process stayed alive across turns.

A reply matches when it is a string equal to the expected text once trailing
whitespace is ignored on both (so `print` newlines do not matter). Reward = fraction
of snippets whose reply matches.
"""

from __future__ import annotations

from typing import Any

from episodes.envs.script import ScriptEnv
from episodes.types.results import Task


class PythonReplEnv(ScriptEnv):
    name = "python-repl"
    messages_key = "snippets"

    def _read_task(self, task: Task) -> tuple[list[Any], list[Any] | None]:
        snippets, expected = super()._read_task(task)
        for key, values in (("snippets", snippets), ("expected", expected or [])):
            bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
            if bad:
                raise ValueError(
                    f"{self.name} env: task {task.id!r}: data.{key}[{bad[0]}] must be a string"
                )
        return snippets, expected

    def matches(self, reply: Any, expected: Any) -> bool:
        if not isinstance(reply, str) or not isinstance(expected, str):
            return False
        return _normalize(reply) == _normalize(expected)


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())
