"""A harness that counts every turn packet it receives (for exactly-once tests).

COUNTING_DELAY_S (seconds) makes every turn that slow.
Replies {"message": <message>, "received": <turn packets seen so far>, "pid": <pid>,
"proc": <an id of this process>}. A turn delivered twice would show up as a jump in
`received`. `pid` is the pid in the harness's box (in a sandbox: always the same small
number), so "is it the same process" is asked of `proc`.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk

received = 0
PROC = os.urandom(8).hex()


def handle(turn, message, emit):
    global received
    received += 1
    time.sleep(float(os.environ.get("COUNTING_DELAY_S", "0")))  # slow turns: one Update each
    return {"message": message, "received": received, "pid": os.getpid(), "proc": PROC}


if __name__ == "__main__":
    sdk.serve(handle)
