"""The agent side of an episode: what a harness reaches besides its turn messages.

`bridge.ToolBridge` serves an environment's tools to the harness over MCP;
`relay` is the stdlib-only in-box piece that makes that bridge reachable from a
container without a network.
"""
