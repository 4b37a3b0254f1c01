"""`make learn`: a GRPO run on a CPU through episodes, from policy server to trainer.

- `learn.policy`: the tiny policy (numpy, float64) over number tokens;
- `learn.server`: it behind an OpenAI-compatible server with vLLM's token fields;
- `learn/harness.py`: the guess-number player the episodes run (stdlib + the sdk);
- `learn.train`: the trainer (`run_batch(groups=True, ...)`, samples, weight swaps);
- `python -m learn`: all of it on an embedded dev server and worker (docs/learn.md).
"""
