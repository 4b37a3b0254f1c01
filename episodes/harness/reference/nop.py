"""Nop harness: answers every turn at once and does nothing else.

The built-in `harness: nop`: a baseline that must score 0 on a sound task (nothing
done, tests fail), which `episodes harbor check` relies on. Standard library only,
runnable as a path (`python3 -I .../nop.py`) with the Docker runtime's bundle.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# `-I` leaves the script's folder off sys.path: find the sdk two folders up.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from episodes.harness import sdk


def handle(turn: int, message: Any, emit: Any) -> Any:
    return ""


def main() -> None:
    sdk.serve(handle)


if __name__ == "__main__":
    main()
