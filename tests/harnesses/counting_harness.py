"""A harness that counts every turn packet it receives (for exactly-once tests).

Replies {"message": <message>, "received": <turn packets seen so far>, "pid": <pid>}.
A turn delivered twice would show up as a jump in `received`.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from episodes.harness import sdk

received = 0


def handle(turn, message, emit):
    global received
    received += 1
    return {"message": message, "received": received, "pid": os.getpid()}


if __name__ == "__main__":
    sdk.serve(handle)
