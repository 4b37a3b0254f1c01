"""The blocking client, for trainers that are not async: `SyncEpisodesClient`.

`client` (`SyncEpisodesClient`, importable as `episodes.client.sync` too), `group`
(`SyncGroup`), `session` (the private event loop thread and `SyncInteractiveSession`).
"""
