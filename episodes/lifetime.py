"""Child processes that die with their parent, even when the parent is SIGKILLed.

Linux's PR_SET_PDEATHSIG, set by exec'ing through util-linux's `setpriv --pdeathsig`
rather than by Python code between fork and exec (which can deadlock a threaded
parent). The signal fires when the *thread* that started the child exits, so start
long-lived children from a thread that lives as long as they should.
"""

from __future__ import annotations

import shutil
import sys

SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def with_death_signal(argv: list[str], signal: str = "KILL") -> list[str]:
    """`argv` prefixed so the program gets `signal` when its parent dies (as is elsewhere)."""
    if SETPRIV is None:
        return argv
    return [SETPRIV, f"--pdeathsig={signal}", "--", *argv]
