"""episodes: durable multi-turn agent episodes on Temporal.

The core package is Temporal-free: specs, environments, runtimes, the harness
wire protocol and process control. Its Temporal-facing parts are `episodes.client`
(what trainers call), `episodes.cli`, and the two modules workflows import,
`episodes.contract` and `episodes.search_attributes`. `workflows/`, `activities/`
and `workers/` build the Temporal application on top of it.
"""

__version__ = "0.1.0"
