"""One episode's live session on a worker, and the turn loop that drives it.

`live` (LiveSession: box + harness + env + transcript), `drive` (the one turn loop:
turns, run-ahead, score, release), `restore` (a lost session rebuilt from its record),
`registry` (the sessions one worker holds). Temporal-free: the activities and the
in-process runner (`episodes.local`) are adapters over these.
"""
