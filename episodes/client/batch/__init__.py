"""Batches: many episodes of one spec, run by the client or by the server.

`options` (`BatchOptions`: how `run_batch` runs a batch), `priority` (a batch's
priority, fairness and budgets given where it starts), `stream` (a client-side batch's
episodes one by one), `dispatch` (one member of a client-side batch across its
attempts, the spec it is dispatched with), `spending` (what a batch spent against its
budget), `server` (batches run by the server: EvalBatchWorkflow), `parking` (park or
resume a whole batch), `live` (how many of a batch's episodes hold a box).
`EpisodesClient.run_batch` (episodes/client/core.py) chooses the stream; groups are in
`episodes.client.group`.
"""
