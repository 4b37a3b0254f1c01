"""Echo harness: replies to every turn with the message it was sent.

The smallest useful harness, for the `script` env and for testing runtimes:

    python -m episodes.harness.reference.echo

It speaks the harness wire protocol on stdin/stdout, so run it under a host (e.g. a
spec with `command: "{python} -m episodes.harness.reference.echo"`), not from a terminal.
Only the standard library and `episodes.harness.sdk` are imported: the same file
runs inside container images that ship just those.
"""

from __future__ import annotations

from typing import Any

from episodes.harness import sdk


def handle(turn: int, message: Any, emit: Any) -> Any:
    return message


def main() -> None:
    sdk.serve(handle)


if __name__ == "__main__":
    main()
