"""`run_batch`'s keyword arguments are typed (`Unpack[BatchKeywords]`): the TypedDict
lists exactly `BatchOptions`' fields but `groups` (a parameter of its own) with the
same types, and a type checker rejects a misspelt keyword."""

import dataclasses
import textwrap
import typing
from pathlib import Path

from mypy import api as mypy_api

from episodes.client.batch.options import BatchKeywords, BatchOptions


def test_the_keywords_are_the_options_fields_with_their_types() -> None:
    fields = typing.get_type_hints(BatchOptions)
    assert set(fields) == {f.name for f in dataclasses.fields(BatchOptions)}
    assert fields.pop("groups") is bool
    assert typing.get_type_hints(BatchKeywords) == fields
    assert not BatchKeywords.__required_keys__  # each may be left out


def test_a_misspelt_keyword_is_a_type_error(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent(
            """
            from episodes.client import EpisodesClient, SyncEpisodesClient

            async def run(client: EpisodesClient) -> None:
                async for group in client.run_batch("spec.yaml", groups=True, concurency=4):
                    group.ack()

            def run_sync(client: SyncEpisodesClient) -> None:
                for result in client.run_batch("spec.yaml", on_stale="sometimes"):
                    print(result.reward)
            """
        )
    )
    out, _, code = mypy_api.run(
        [str(script), "--follow-imports=silent", "--no-error-summary", "--cache-dir", str(tmp_path)]
    )
    assert code == 1, out
    lines = out.splitlines()
    assert any("concurency" in line for line in lines), out
    assert any("on_stale" in line or "sometimes" in line for line in lines), out
    assert len(lines) >= 2 and all("trainer.py" in line for line in lines if "error" in line), out
