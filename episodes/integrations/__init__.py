"""Glue that lets trainers' own interfaces (OpenEnv, verifiers, TRL) drive durable episodes."""
