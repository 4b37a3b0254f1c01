"""A harness for payload and secret tests: each message says what to produce.

Run by file path: `python payload_harness.py [crash-at-start]`. Standard library and the
harness SDK only. `crash-at-start` prints the whole environment to stderr and exits 4
before `ready` (the stderr tail becomes the provision failure's message).
A message is a dict:
  {"seed": S, "reply_bytes": N, "event_bytes": M}   reply {"turn", "blob": blob(S, N)},
                                                     after one event {"blob": blob(S-event, M)}
  {"secret": VAR, "proof_file": PATH, "leak": true, "crash": false}
      reply {"sha256": sha256 of $VAR}; writes $VAR to PATH (the test reads it); with
      leak, also puts $VAR into the reply, an event and stderr (all must be scrubbed);
      with crash, prints its whole environment to stderr and exits 3 (the stderr tail
      becomes the episode's error).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk


def blob(seed: str, n: int) -> str:
    """n deterministic characters the test can recompute."""
    unit = hashlib.sha256(seed.encode()).hexdigest()
    return (unit * (n // len(unit) + 1))[:n]


def handle(turn, message, emit):  # type: ignore[no-untyped-def]
    if "secret" in message:
        value = os.environ.get(message["secret"], "")
        Path(message["proof_file"]).write_text(value)
        reply = {"sha256": hashlib.sha256(value.encode()).hexdigest()}
        if message.get("leak"):
            print(f"harness: {message['secret']}={value}", file=sys.stderr, flush=True)
            emit({"env_seen": value})
            reply["echo"] = f"the secret is {value}"
        if message.get("crash"):
            for k, v in sorted(os.environ.items()):
                print(f"{k}={v}", file=sys.stderr)
            sys.stderr.flush()
            os._exit(3)
        return reply
    seed = message["seed"]
    if message.get("event_bytes"):
        emit({"blob": blob(f"{seed}-event", message["event_bytes"])})
    return {"turn": turn, "blob": blob(seed, message.get("reply_bytes", 0))}


if __name__ == "__main__":
    if "crash-at-start" in sys.argv[1:]:
        for k, v in sorted(os.environ.items()):
            print(f"{k}={v}", file=sys.stderr)
        sys.stderr.flush()
        sys.exit(4)
    sdk.serve(handle)
