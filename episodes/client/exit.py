"""Leave a short-lived Temporal client process without a finalization crash.

The SDK's Rust bridge keeps native threads that may still touch the interpreter
while CPython finalizes, which aborts the process now and then ("PyGILState_Release:
thread state must be current", temporalio/sdk-python#300) — after all the work is
done, but with exit code -6. Our commands and examples end through `exit_process`:
flush, run the atexit handlers ourselves (e.g. the Docker backstop), then `os._exit`.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable


def exit_process(code: int | str | None = 0) -> None:
    if isinstance(code, str):  # sys.exit("message") semantics
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe must not turn a clean exit into a traceback
            pass
    atexit._run_exitfuncs()
    os._exit(code or 0)


def run_main(main: Callable[[], int | None]) -> None:
    """`main()`'s return value (or SystemExit) becomes the exit code, via exit_process."""
    code: int | str | None
    try:
        code = main()
    except SystemExit as e:
        code = e.code
    exit_process(code)
