"""Tuning defaults shared by the workflows, the activities and the client.

Plain constants, in one place so a figure quoted in the docs is defined once. What
each bound buys is in the docs (concepts, "Turns at the harness's pace") and
bench/README.md.
"""

from __future__ import annotations

DEFAULT_TASK_QUEUE = "episodes"
# A long episode continues-as-new after this many turns in one run (or earlier, when
# the server suggests it), so its history stays bounded however many turns it takes.
DEFAULT_TURNS_PER_RUN = 1000
# What the `progress` query returns by default: the last turns, within a byte budget.
DEFAULT_PROGRESS_TURNS = 100
PROGRESS_MAX_BYTES = 2 * 1024 * 1024
# Finished turns the drive may run ahead of history, and the most one Update carries:
# far below Temporal's 2 MB payload limit whatever the turns hold.
DEFAULT_PIPELINE = 256
DEFAULT_MAX_LAG_S = 1.0
DEFAULT_UPDATE_BYTES = 512 * 1024
DEFAULT_LINGER_S = 0.05

# An interactive session ends `idle_timeout` after this long without a step.
DEFAULT_IDLE_TIMEOUT_S = 600.0

# Leaves headroom under the server's 2 MB payload limit for the carried-over state.
MAX_INPUT_BYTES = 1_500_000
# A run also continues-as-new after starting this many children, even if the server has
# not suggested it yet (its default suggestion comes at 4096 history events).
DEFAULT_CHILDREN_PER_RUN = 2000

# The largest wire-protocol packet a harness may send (docs/protocol.md).
DEFAULT_MAX_PACKET_BYTES = 16 * 1024 * 1024

# How deeply JSON a harness, an ACP agent or a model upstream sends may nest (arrays and
# objects): deeper is a protocol error (a model error for an upstream's answer). Python's
# json parser recurses (5,000 levels raise RecursionError) and Temporal's converter
# refuses ~200, so a deeper value would fail the workflow instead of ending the episode.
MAX_JSON_DEPTH = 128
