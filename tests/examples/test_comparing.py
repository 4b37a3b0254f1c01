"""docs/comparing.md's worked example: the page shows the harness as it is, and the two
specs are the same eval but for the harness's mode (what the page's warning names)."""

from __future__ import annotations

from episodes.evals.manifest import spec_hash
from episodes.specfile import load_spec
from tests.conftest import ROOT

FOLDER = ROOT / "examples" / "comparing"


def test_the_page_shows_the_harness_as_it_is() -> None:
    page = (ROOT / "docs" / "comparing.md").read_text()
    assert (FOLDER / "guesser.py").read_text().rstrip("\n") in page


def test_the_two_specs_differ_only_in_the_harness() -> None:
    noisy, bisect = load_spec(FOLDER / "spec.yaml"), load_spec(FOLDER / "spec-bisect.yaml")
    assert [t.id for t in noisy.load_tasks()] == [f"t{i:02d}" for i in range(40)]
    assert noisy.harness.command[-1] == "random" and bisect.harness.command[-1] == "bisect"
    same = bisect.model_copy(update={"harness": noisy.harness, "name": noisy.name})
    assert spec_hash(same) == spec_hash(noisy) != spec_hash(bisect)
