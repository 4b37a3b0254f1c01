"""Agents that talk to models and tools: the model proxy, the scripted upstream, the MCP bridge."""
