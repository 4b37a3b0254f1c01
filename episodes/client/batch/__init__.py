"""Batches: many episodes of one spec, run by the client or by the server.

`dispatch` (one member of a client-side batch across its attempts, the spec it is
dispatched with), `spending` (what a batch spent against its budget), `server`
(batches run by the server: EvalBatchWorkflow), `parking` (park or resume a whole
batch), `live` (how many of a batch's episodes hold a box). `EpisodesClient.run_batch`
(episodes/client/core.py) streams a client-side batch with these.
"""
