"""The spec a groups stream runs: `run_batch`'s `oversample` / `skip_zero_variance`
over the spec's, and the checks that they apply to groups only."""

from __future__ import annotations

from episodes.errors import EpisodesError
from episodes.types.spec import EpisodeSpec


def groups_spec(
    spec: EpisodeSpec,
    groups: bool,
    oversample: int | None = None,
    skip_zero_variance: bool | None = None,
) -> EpisodeSpec:
    """`spec` with the arguments given in place of its own. Either set without groups
    is an error: oversampling and skipping mean nothing to single episodes."""
    update: dict[str, object] = {}
    if oversample is not None:
        if oversample < 0:
            raise EpisodesError(f"oversample={oversample}: give 0 or more spare members")
        update["oversample"] = oversample
    if skip_zero_variance is not None:
        update["skip_zero_variance"] = skip_zero_variance
    spec = spec.model_copy(update=update) if update else spec
    if not groups:
        if spec.oversample:
            raise EpisodesError(
                f"oversample {spec.oversample} applies to groups: pass groups=True "
                "(`episodes run` streams groups when the spec sets it)"
            )
        if spec.skip_zero_variance:
            raise EpisodesError("skip_zero_variance applies to groups: pass groups=True")
    return spec
