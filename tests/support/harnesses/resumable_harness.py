"""A harness whose state is every message it has seen (for restore tests).

Replies {"message": <message>, "seen": <messages seen, this one included>}. With the
argument `resume` it declares `resume: true` and rebuilds that state from a `resume`
packet's transcript; without it a restore replays the turns to it one by one.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk

seen: list = []


def handle(turn, message, emit):
    seen.append(message)
    return {"message": message, "seen": len(seen)}


def resume(transcript):
    seen[:] = [t["message"] for t in transcript]
    print(f"resumed from {len(transcript)} turns", file=sys.stderr)


if __name__ == "__main__":
    sdk.serve(handle, resume=resume if "resume" in sys.argv[1:] else None)
