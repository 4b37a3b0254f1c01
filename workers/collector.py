"""The worker process's garbage collector, set for a long-lived server.

    tune_collector()    # once start-up is done, before the worker polls

A worker holds many long-lived objects (its imported modules and classes, the SDK's
and pydantic's schemas, its live sessions) and makes many short-lived ones per model
call and turn (requests, answers, records). CPython's default collects the youngest
generation every 700 net container allocations; an object alive at one (a request
in flight at the time, say) is promoted, and once alive at a middle collection too,
is walked again by every full collection. At 256 sessions calling their models
through the proxy, that was about a sixth of the worker's CPU (bench/README.md,
issue 32).

Two changes, each a process-wide choice, so made by the worker's own process (`episodes
worker`), never by the library in a process of yours (a trainer running episodes
in-process keeps its own settings):

- `gc.freeze()`: what start-up made moves to a permanent generation that no collection
  walks again (after one collection, so no garbage is kept forever);
- the youngest generation collected every `young` net allocations (default 10,000
  instead of 700): rarer collections, and fewer short-lived objects promoted because
  they happened to be alive at one. Reference cycles are still collected, after at
  most `young` more net container allocations instead of 700 (what a cycle holds
  lives that much longer).
"""

from __future__ import annotations

import gc

YOUNG = 10_000


def tune_collector(young: int = YOUNG) -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
