"""A scripted OpenAI-compatible upstream: real HTTP on loopback, no model behind it.

`server` (`ScriptedUpstream`: answers from a script or a policy, with vLLM-style token
data), `policies` (the rules that pick each step), `chat_template` (a deterministic
tokenizer and a ChatML-style template, for the extension property). Run it with
`python -m episodes.model.scripted --policy kv`.
"""
