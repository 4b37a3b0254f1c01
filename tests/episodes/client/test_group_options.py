"""`run_batch`'s oversample / skip_zero_variance over the spec's, and where they apply."""

from __future__ import annotations

import pytest

from episodes.client.batch.server import batch_input
from episodes.client.group.options import groups_spec
from episodes.errors import EpisodesError
from tests.support.helpers import spec


def test_arguments_replace_the_specs() -> None:
    s = spec(samples=2, oversample=1)
    assert groups_spec(s, True).oversample == 1
    got = groups_spec(s, True, oversample=3, skip_zero_variance=True)
    assert (got.oversample, got.skip_zero_variance, got.samples) == (3, True, 2)
    assert groups_spec(s, True, oversample=0).oversample == 0


def test_they_apply_to_groups_only() -> None:
    with pytest.raises(EpisodesError, match="oversample 1 applies to groups: pass groups=True"):
        groups_spec(spec(oversample=1), False)
    with pytest.raises(EpisodesError, match="skip_zero_variance applies to groups"):
        groups_spec(spec(), False, skip_zero_variance=True)
    assert groups_spec(spec(), False, oversample=0).oversample == 0
    with pytest.raises(EpisodesError, match="a batch workflow runs every member"):
        batch_input(spec(oversample=2))
