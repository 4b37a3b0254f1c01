"""`harness.runtime` as an ordered list of runtimes (issue 44 §2): the first stays
`runtime` (every reader of it is unchanged), the rest are `spillover`; a bare name is
that runtime with its defaults; a bad entry is one line naming its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodes.errors import SpecError
from episodes.specfile import load_spec
from episodes.types.runtime import DockerConfig, SubprocessConfig
from episodes.types.spec import EpisodeSpec
from tests.support.helpers import spec

SPEC = """\
name: t
env: guess-number
tasks:
  - id: a
    data: {}
harness:
  command: [python, x.py]
  runtime: RUNTIME
max_turns: 3
"""


def _load(tmp_path: Path, runtime: str) -> EpisodeSpec:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.replace("RUNTIME", runtime))
    return load_spec(p)


def test_a_list_is_the_runtime_then_its_spillover(tmp_path: Path) -> None:
    s = _load(tmp_path, "[{type: subprocess, isolation: none}, docker, {type: modal}]")
    assert s.harness.runtime == SubprocessConfig(isolation="none")
    assert [c.type for c in s.harness.spillover] == ["docker", "modal"]
    assert [c.type for c in s.harness.runtimes] == ["subprocess", "docker", "modal"]
    # It survives the trip through a workflow's input.
    again = EpisodeSpec.model_validate_json(s.model_dump_json())
    assert again.harness.runtimes == s.harness.runtimes


def test_a_bare_name_and_a_one_entry_list_are_that_runtime(tmp_path: Path) -> None:
    assert _load(tmp_path, "docker").harness.runtime == DockerConfig()
    one = _load(tmp_path, "[docker]").harness
    assert one.runtime == DockerConfig() and one.spillover == []


def test_a_spec_without_a_list_is_as_before() -> None:
    h = spec().harness
    assert h.runtime == SubprocessConfig() and h.spillover == [] and h.runtimes == [h.runtime]


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ("[]", "runtime: an empty list names no runtime"),
        ("[docker, kubernetes]", "runtime[1]: 'kubernetes' is not a runtime"),
        ("[docker, {type: docker, imag: x}]", "runtime[1]: imag: Extra inputs are not permitted"),
        ("[docker, {type: nope}]", "runtime[1]: Input tag 'nope'"),
        ("[docker, {type: modal, limits: {memory: lots}}]", "runtime[1]: limits.memory: 'lots'"),
    ],
)
def test_a_bad_list_is_one_line_naming_the_entry(
    tmp_path: Path, runtime: str, expected: str
) -> None:
    with pytest.raises(SpecError) as e:
        _load(tmp_path, runtime)
    message = str(e.value)
    assert "\n" not in message and expected in message, message


def test_a_list_and_spillover_together_are_refused() -> None:
    with pytest.raises(Exception, match="write the list only"):
        spec(harness={"runtime": ["docker", "modal"], "spillover": ["e2b"]})


def test_a_spec_without_spillover_keeps_the_hash_it_had() -> None:
    """Manifests compare runs by `spec_hash`: the new field must not change the hash of a
    spec that does not use it (runs from before it stay comparable)."""
    import hashlib
    import json

    from episodes.evals.manifest import UNPINNED, spec_hash

    s = spec()
    before = s.model_dump(mode="json", exclude=set(UNPINNED))
    before["harness"].pop("spillover")
    text = json.dumps(before, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert spec_hash(s) == hashlib.sha256(text.encode()).hexdigest()
    spilling = spec(harness={"runtime": ["subprocess", "docker"]})
    assert spec_hash(spilling) != spec_hash(s)
