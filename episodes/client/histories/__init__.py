"""What the client reads back from workflow histories, and the episodes that replay it.

`transcript` (an episode's transcript rebuilt from its histories), `fork` (branches
that replay an episode's first turns exactly), `replaying` (`EpisodesClient`'s fork,
park and resume methods).
"""
