"""Environments: the environment API, the loader, and the built-in envs."""

from episodes.envs.base import Environment
from episodes.envs.registry import BUILTINS, check_env_ref, load_env, resolve_env_class

__all__ = ["BUILTINS", "Environment", "check_env_ref", "load_env", "resolve_env_class"]
