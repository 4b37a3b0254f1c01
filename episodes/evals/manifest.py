"""A batch's manifest: what it pinned, so two runs are known to be the same eval.

The client writes it at start into the memo (key `manifest`) of every workflow it
starts for a batch: each episode, group and fork branch (`episodes.client.starting`)
and a server batch's `EvalBatchWorkflow` (`episodes.client.batch.server`). A memo is
set with the start request and read with a describe: no workflow code reads or
writes it, so no history replays differently. `episodes compare` reads it back
(the batch workflow's, else the first episode's) and adds what only the histories
know, the model's fingerprints: the `system_fingerprint` and the served `model`
that the upstream returned with each call (`fingerprints`).

Pinned (compared field by field by `differences`):

- `spec_hash`: sha256 of the spec as the episodes run it, less what does not change
  an episode's outcome (its name, the task list, which the pairing compares, and the
  scheduling: concurrency, priority, fairness, budget, pool, reuse key, prices);
- `runtime`: the box runtime's type; `images`: the image references the spec names,
  with `image_digests` for those pinned by digest (`name@sha256:...`): a tag alone
  is not a pin (a rebuilt `:latest` reads the same), and the warning says so;
- `model`: the model name the spec asks for;
- `package`: this package's version; `python`: the Python that started the batch.

Pure: no Temporal (the memo is read by the caller).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
from collections.abc import Iterable, Mapping
from typing import Any

from episodes.types.spec import EpisodeSpec

MEMO_KEY = "manifest"
# Spec fields that change how episodes are scheduled, never how one ends.
UNPINNED = frozenset(
    {
        "name",
        "tasks",
        "dataset",
        "harbor",
        "concurrency",
        "priority",
        "fairness_key",
        "fairness_weight",
        "budget",
        "pool",
        "reuse_key",
        "prices",
    }
)
PINNED = ("spec_hash", "runtime", "images", "image_digests", "model", "package", "python")


def spec_hash(spec: EpisodeSpec) -> str:
    """sha256 of the spec's pinned fields as canonical JSON (sorted keys)."""
    data = spec.model_dump(mode="json", exclude=set(UNPINNED))
    if not data["harness"].get("spillover"):
        # Added after hashes were recorded: a spec without it hashes as it always did.
        data["harness"].pop("spillover", None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def images(spec: EpisodeSpec) -> list[str]:
    """The image references the spec's runtimes name (none for a subprocess), its
    spillover runtimes' after the first's."""
    refs: list[str] = []
    for runtime in spec.harness.runtimes:
        ref = getattr(runtime, "image", None) or getattr(runtime, "docker_image", None)
        if isinstance(ref, str) and ref and ref not in refs:
            refs.append(ref)
    return refs


@functools.cache
def package_version() -> str:
    """This package's installed version (its distribution's metadata)."""
    try:
        return importlib.metadata.version("episodes")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def manifest_of(spec: EpisodeSpec) -> dict[str, Any]:
    """The manifest of a batch run with `spec` (JSON-ready: it goes into a memo)."""
    refs = images(spec)
    return {
        "spec_hash": spec_hash(spec),
        "runtime": spec.harness.runtime.type,
        "images": refs,
        "image_digests": {r: r.split("@", 1)[1] for r in refs if "@sha256:" in r},
        "model": spec.model.model if spec.model else None,
        "package": package_version(),
        "python": platform.python_version(),
    }


def fingerprints(responses: Iterable[Any]) -> dict[str, list[str]]:
    """What the upstream said it was, over a batch's model calls' responses: its
    `system_fingerprint`s and the `model`s it answered as, each sorted and distinct."""
    seen: dict[str, set[str]] = {"system_fingerprint": set(), "served_model": set()}
    for r in responses:
        if not isinstance(r, Mapping):
            continue
        if isinstance(r.get("system_fingerprint"), str):
            seen["system_fingerprint"].add(r["system_fingerprint"])
        if isinstance(r.get("model"), str):
            seen["served_model"].add(r["model"])
    return {k: sorted(v) for k, v in seen.items()}


def differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """One line per pinned field the two manifests disagree on (or a missing manifest).
    Empty: the same pins."""
    if a is None or b is None:
        which = " and ".join(n for n, m in (("A", a), ("B", b)) if m is None)
        return [f"no manifest recorded for {which} (started before manifests existed)"]
    out = []
    for key in (*PINNED, "system_fingerprint", "served_model"):
        va, vb = a.get(key), b.get(key)
        if va is None and vb is None:
            continue
        if va != vb:
            out.append(f"different {key}: A {_short(va)}, B {_short(vb)}")
    return out


def unpinned(*manifests: Mapping[str, Any] | None) -> list[str]:
    """What the manifests cannot vouch for: images named by tag only (a rebuilt
    `:latest` reads the same)."""
    refs = {r for m in manifests if m for r in m.get("images") or []}
    return [
        f"image {r} is pinned by tag only: a rebuilt image under it would not show"
        for r in sorted(refs)
        if "@sha256:" not in r
    ]


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12]
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False) if value else "none"
    return "none" if value is None else str(value)
