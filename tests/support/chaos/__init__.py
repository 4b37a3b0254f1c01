"""Real worker processes for the chaos tests (marked `chaos`), their envs, and a dev
server of each module's own."""
