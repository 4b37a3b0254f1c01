"""The runtime self-check: plain async checks any backend must pass.

    runner  the checks' runner and its command line (`python -m episodes.runtimes.selfcheck`)
    kit     what a check is given (Subject), and its helpers
    box     checks of the env's handle on a box (`Box`)
    fresh   checks that need a fresh box each

Names of the old `episodes.runtimes.selfcheck` module (now `runner`) still resolve
here, imported when first asked for.
"""

from __future__ import annotations

from episodes import _moved

__getattr__ = _moved.names_of(__name__, "episodes.runtimes.selfcheck.runner")
