"""Groups: the samples of one task in a batch, yielded whole (`run_batch(groups=True)`).

`stream` (the `Group` and the default stream: one episode workflow a member),
`execution` (`execution="group"`: one workflow a group), `options` (the spec a groups
stream runs: `oversample`, `skip_zero_variance`), `history` (a group member's
transcript, read from its group workflow), `staleness` (`max_staleness` with
`on_stale`: keep and pace, or requeue), `receipts` (the groups a trainer acknowledged,
kept on the server for a trainer that restarts).
"""
