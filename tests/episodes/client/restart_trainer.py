"""A small trainer for test_trainer_restart: runs a batch as groups with the blocking
client, acknowledges each group, and SIGKILLs itself at the point it is told.

    python restart_trainer.py ADDRESS QUEUE SPEC BATCH LOG --die ack:5

`--die ack:N`: right after its Nth acknowledgement; `--die recv:N`: on receiving its
Nth group, before acknowledging it (that group must come again). Each line of LOG is
`recv <group id>` or `ack <group id>`, flushed before the next step.
"""

from __future__ import annotations

import argparse
import os
import signal

from episodes.client.blocking.client import SyncEpisodesClient


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("address", "queue", "spec", "batch", "log"):
        p.add_argument(name)
    p.add_argument("--die", default=None)
    a = p.parse_args()
    when, _, n = (a.die or "never:0").partition(":")
    with (
        open(a.log, "a", buffering=1) as log,
        SyncEpisodesClient.connect(a.address, task_queue=a.queue) as sc,
    ):
        received = acked = 0
        for group in sc.run_batch(a.spec, groups=True, batch_id=a.batch, concurrency=8):
            received += 1
            log.write(f"recv {group.group_id}\n")
            if when == "recv" and received == int(n):
                os.kill(os.getpid(), signal.SIGKILL)
            group.ack()  # sc.ack(group) does the same
            acked += 1
            log.write(f"ack {group.group_id}\n")
            if when == "ack" and acked == int(n):
                os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
