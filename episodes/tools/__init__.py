"""The environment's tools, served to the harness over MCP.

`bridge` (`ToolBridge`: one session's tools on a loopback port and, for boxes without a
network, a Unix socket; every call recorded) and `bridge_http` (its bearer-token guard and
in-process uvicorn, with the harness's bounds).
"""
