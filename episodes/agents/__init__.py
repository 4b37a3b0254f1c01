"""The agent side of an episode: what a harness reaches besides its turn messages.

`bridge.ToolBridge` serves an environment's tools to the harness over MCP; `relay` is
the stdlib-only in-box piece that makes that bridge reachable from a container without
a network; `proxy.ModelProxy` is the per-session OpenAI-compatible endpoint that records
every model call; `scripted` is a real OpenAI-compatible server that answers from a
script or a rule (tests and the demo).
"""
