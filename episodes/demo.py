"""`make demo`: real episodes through the embedded Temporal dev server and a worker.

Runs the guess-number and python-repl examples (and a Docker-backed one when an
engine answers and the harness image exists), then tool-using LLM agent episodes
(kv-agent: the env's tools over MCP, the model through the session's proxy) against
a scripted model server the demo starts itself, on subprocess and, with the agent
image, on Docker. Prints a results table and the UI address, and leaves the
histories in .episodes/ for `episodes dev` to show later.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from episodes.cli.common import console, summary_table
from episodes.cli.embedded import embedded_stack
from episodes.client import EpisodesClient
from episodes.errors import EpisodesError
from episodes.model.scripted.server import ScriptedUpstream, kv_policy
from episodes.specfile import load_spec
from episodes.types.results import EpisodeResult
from episodes.types.spec import EpisodeSpec

DEMO_SANDBOX_HINT = (
    "the demo's examples run in the sandbox; `.venv/bin/episodes doctor` checks this machine"
)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def demo_specs(model_url: str) -> list[EpisodeSpec]:
    specs = [
        load_spec(EXAMPLES / "guess-number.yaml").model_copy(update={"samples": 6}),
        load_spec(EXAMPLES / "python-repl.yaml").model_copy(update={"samples": 4}),
        _with_model(load_spec(EXAMPLES / "kv-agent.yaml"), model_url),
    ]
    if _docker_ready("episodes-harness:latest"):
        specs.append(load_spec(EXAMPLES / "docker-repl.yaml"))
    if _docker_ready("episodes-agent:latest"):
        specs.append(_with_model(load_spec(EXAMPLES / "docker-kv-agent.yaml"), model_url))
    return specs


def _with_model(spec: EpisodeSpec, url: str) -> EpisodeSpec:
    """The example's model pointed at the demo's own scripted server."""
    assert spec.model is not None
    return spec.model_copy(update={"model": spec.model.model_copy(update={"base_url": url})})


def _docker_ready(image: str) -> bool:
    try:
        from episodes.runtimes.docker.runtime import image_available

        return image_available(image)
    except Exception:  # no SDK, no engine: the demo runs without Docker
        return False


async def run_demo(port: int | None, keep: bool) -> None:
    async with ScriptedUpstream(policy=kv_policy) as model:
        await _run_demo(port, keep, model)


async def _run_demo(port: int | None, keep: bool, model: ScriptedUpstream) -> None:
    specs = demo_specs(model.base_url)
    batch = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    with console.status("starting the embedded Temporal dev server and a worker"):
        # This checkout's running `episodes dev` server, else one of the demo's own (on
        # free ports unless PORT is given); always a queue of its own: another
        # checkout's worker must not take the demo's episodes (issue 27).
        stack_cm = embedded_stack(port=port, sandbox_hint=DEMO_SANDBOX_HINT)
        stack = await stack_cm.__aenter__()
    try:
        client = EpisodesClient(stack.client, task_queue=stack.task_queue)
        console.print(
            f"[green]✓[/] Temporal at {stack.server.address}, worker {stack.worker.worker_id} "
            f"on queue {stack.task_queue}"
        )
        total = sum(len(s.load_tasks()) * s.samples for s in specs)
        console.print(
            f"running {total} episodes ({', '.join(s.name for s in specs)}) as batch {batch}"
        )
        console.print(
            f"[dim]kv-agent: the model is scripted (a rule-based policy on a real HTTP server at "
            f"{model.base_url}); the tool bridge, the model proxy, the LLM harness and the "
            "recording are real[/]"
        )
        results: list[EpisodeResult] = []

        async def one_spec(spec: EpisodeSpec) -> None:
            async for r in client.run_batch(spec, batch_id=f"{batch}-{spec.name}"):
                results.append(r)
                console.print(
                    f"  {r.spec_name:<13} {r.task_id:<24} s{r.sample} {r.termination:<9} "
                    f"turns={r.turns:<2} reward={'-' if r.reward is None else f'{r.reward:.2f}'}",
                    highlight=False,
                )

        await asyncio.gather(*(one_spec(s) for s in specs))
        wall = time.monotonic() - started
        for spec in specs:
            mine = [r for r in results if r.spec_name == spec.name]
            console.print(summary_table(mine, title=spec.name))
        agents = [r for r in results if r.spec_name.endswith("kv-agent")]
        if agents:
            await _show_calls(client, agents[0])
        console.print(_latency_table(results, wall))
        ui = stack.server.ui_url
        if ui:
            console.print(
                f'\nTemporal UI: [bold]{ui}[/] (search: EpisodeBatch STARTS_WITH "{batch}")'
            )
        if keep and stack.server.ui_url:
            console.print("the server and worker stay up for the UI — Ctrl-C to stop")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        else:
            console.print("histories are kept in .episodes/: `.venv/bin/episodes dev` shows them")
    finally:
        await stack_cm.__aexit__(None, None, None)


async def _show_calls(client: EpisodesClient, result: EpisodeResult) -> None:
    """What one agent transcript records, as a trainer reads it back from history."""
    transcript = await client.transcript(result.workflow_id)
    tools, calls = transcript.tool_calls(), transcript.model_calls()
    tokens = sum((c.usage.total_tokens or 0) if c.usage else 0 for c in calls)
    with_logprobs = sum(1 for c in calls if c.completion_logprobs is not None)
    console.print(
        f"{result.workflow_id}: {len(tools)} tool calls "
        f"({', '.join(c.name for c in tools)}), {len(calls)} model calls, {tokens} tokens, "
        f"{with_logprobs} with logprobs and token ids "
        f"(`episodes show {result.workflow_id}` prints them)"
    )


def _latency_table(results: list[EpisodeResult], wall: float) -> Table:
    turns = sum(r.turns for r in results)
    table = Table(title="demo", show_header=False, title_justify="left")
    table.add_row("episodes", str(len(results)))
    table.add_row("turns", str(turns))
    table.add_row("wall time", f"{wall:.1f} s (incl. server start)")
    table.add_row("throughput", f"{turns / wall:.0f} turns/s, {len(results) / wall:.1f} episodes/s")
    per_turn = [r.duration_s / r.turns for r in results if r.turns]
    if per_turn:
        table.add_row(
            "episode duration / turns",
            f"median {statistics.median(per_turn) * 1000:.0f} ms "
            "(provision and queueing included; see bench/ for per-turn overhead)",
        )
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="the Temporal dev server's port (default: free ports, or the server of this "
        "checkout's running `episodes dev`)",
    )
    parser.add_argument(
        "--keep",
        action=argparse.BooleanOptionalAction,
        default=sys.stdin.isatty(),
        help="keep the server and UI up after the run (default: when run in a terminal)",
    )
    args = parser.parse_args()
    try:
        asyncio.run(run_demo(args.port, args.keep))
    except KeyboardInterrupt:
        pass
    except EpisodesError as e:  # no sandbox, a taken port: one line, not a traceback
        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2
    return 0


if __name__ == "__main__":
    from episodes.client.exit import run_main

    run_main(main)
