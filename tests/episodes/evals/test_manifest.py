"""A batch's manifest: what its hash pins and what it leaves to the pairing."""

from __future__ import annotations

from episodes.evals.manifest import differences, fingerprints, manifest_of, spec_hash, unpinned
from episodes.types.spec import EpisodeSpec


def _spec(**extra: object) -> EpisodeSpec:
    return EpisodeSpec.model_validate(
        {
            "name": "s",
            "env": "script",
            "tasks": [{"id": "a"}],
            "harness": {"command": "echo"},
            **extra,
        }
    )


def test_the_spec_hash_ignores_names_tasks_and_scheduling() -> None:
    base = spec_hash(_spec())
    assert spec_hash(_spec(name="other", tasks=[{"id": "b"}], concurrency=3, priority=2)) == base
    assert spec_hash(_spec(turn_timeout_s=45)) != base
    assert spec_hash(_spec(samples=2)) != base


def test_images_pinned_by_digest_and_by_tag() -> None:
    digest = "sha256:" + "ab" * 32
    pinned = manifest_of(
        _spec(harness={"command": "x", "runtime": {"type": "docker", "image": f"img@{digest}"}})
    )
    tagged = manifest_of(
        _spec(harness={"command": "x", "runtime": {"type": "docker", "image": "img:latest"}})
    )
    assert pinned["runtime"] == "docker" and pinned["image_digests"] == {f"img@{digest}": digest}
    assert tagged["image_digests"] == {}
    assert unpinned(pinned, tagged) == [
        "image img:latest is pinned by tag only: a rebuilt image under it would not show"
    ]
    lines = differences(pinned, tagged)
    assert f'different images: A ["img@{digest}"], B ["img:latest"]' in lines


def test_differences_name_each_pin_and_a_missing_manifest() -> None:
    a = {**manifest_of(_spec()), **fingerprints([{"system_fingerprint": "fp1", "model": "m"}])}
    b = {**a, "system_fingerprint": ["fp2"], "package": "9.9"}
    assert differences(a, dict(a)) == []
    assert differences(a, b) == [
        f"different package: A {a['package']}, B 9.9",
        'different system_fingerprint: A ["fp1"], B ["fp2"]',
    ]
    assert differences(None, b) == ["no manifest recorded for A (started before manifests existed)"]


def test_fingerprints_are_what_the_upstream_said() -> None:
    seen = fingerprints(
        [
            {"system_fingerprint": "fp_b", "model": "m-2025"},
            {"system_fingerprint": "fp_a", "model": "m-2025"},
            None,
            "an error body",
            {"model": "m-2024"},
        ]
    )
    assert seen == {"system_fingerprint": ["fp_a", "fp_b"], "served_model": ["m-2024", "m-2025"]}
