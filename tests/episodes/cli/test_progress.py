"""Off a terminal, `episodes run`'s progress is a plain line every few seconds, not
nothing until the end (nohup, a CI log)."""

from __future__ import annotations

import io

from rich.console import Console

from episodes.cli import common
from tests.support.procs import wait_until


def test_off_a_terminal_a_line_comes_while_the_bar_runs(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=out, force_terminal=False, width=200))
    monkeypatch.setenv("EPISODES_PROGRESS_EVERY_S", "0.05")
    with common.progress_bar() as progress:
        bar = progress.add_task("spec · live 1/4", total=4, last="")
        progress.update(bar, advance=1, last="a#0 env_done 1.000")
        # Lines come while the bar is still running (the old bar printed nothing here).
        assert wait_until(lambda: "1/4 · a#0 env_done 1.000" in out.getvalue(), 30)
    assert out.getvalue().splitlines()[0].startswith("spec · live 1/4: ")


def test_on_a_terminal_the_bar_is_rich(monkeypatch) -> None:
    monkeypatch.setattr(common, "console", Console(file=io.StringIO(), force_terminal=True))
    assert type(common.progress_bar()).__name__ == "Progress"
