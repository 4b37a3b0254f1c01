"""An episode's transcript rebuilt from its workflow histories (every continue-as-new run).

The history is the transcript: the provision's SessionRef (first message), the turns
the drive recorded with `record_turns` Updates (or an interactive session's `turn`
activities), restores, the result. No worker is needed, and turns are decoded through
the client's data converter, so turns kept in external storage come back whole.

`episodes show` prints it; trainers get it typed from `EpisodesClient.transcript`:

    transcript = await client.transcript("guess-number.secret-42.s0")
    for call in transcript.model_calls():          # typed ModelCalls, in the order made
        call.prompt_ids, call.completion_ids, call.completion_logprobs

The `score_transcript` and `restore` activities read the turns of earlier runs (or of
a lost session) from here instead of carrying them in workflow inputs, which must
stay small however long the episode.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from episodes import contract
from episodes.errors import EpisodesError
from episodes.types.io import DriveResult, RestoreResult, SessionRef
from episodes.types.priority import RecordedUsage, records_usage
from episodes.types.results import EpisodeResult, Task, Transcript, TurnRecord, TurnResult


async def fetch_transcript(client: Client, workflow_id: str) -> Transcript:
    """The episode's transcript as the env's rubric sees it (every run, in order)."""
    return transcript_of(await load_transcript(client, workflow_id))


def transcript_of(data: dict[str, Any]) -> Transcript:
    """The Transcript of what `load_transcript` read."""
    result = data["result"] or {}
    return Transcript(
        task=Task.model_validate(data["task"] or {"id": "?"}),
        first_message=(data["session"] or {}).get("first_message"),
        turns=[TurnRecord.model_validate(t["record"]) for t in data["turns"]],
        termination=result.get("termination"),
        error=result.get("error"),
        replayed_turns=data.get("replayed_turns", 0),
    )


async def load_transcript(
    client: Client, workflow_id: str, *, max_turns: int | None = None, tolerant: bool = False
) -> dict[str, Any]:
    """Every run of the episode (a long one continues-as-new), oldest first: the session,
    the turns (TurnResult dicts, at most `max_turns`) and the result.

    `tolerant` (readers that show what they can, like `episodes view`): a payload the
    converter cannot decode (encrypted under a key this process lacks, a stored payload
    gone missing) is listed in `undecodable` instead of failing the whole read; turns an
    undecodable `record_turns` Update carried become placeholders (`undecodable: true`),
    numbered from its update id. Scoring and restores never pass it: a transcript with
    holes must not be scored."""
    from temporalio.service import RPCError

    out: dict[str, Any] = {
        "workflow_id": workflow_id,
        "task": None,
        "session": None,
        "turns": [],
        "result": None,
    }
    if tolerant:
        out["undecodable"] = []
    run_id: str | None = None
    try:
        latest = client.get_workflow_handle(workflow_id)
        async for ev in latest.fetch_history_events(page_size=1):
            run_id = ev.workflow_execution_started_event_attributes.first_execution_run_id
            break
        while run_id and (max_turns is None or len(out["turns"]) < max_turns):
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            run_id = await _read_run(client, history.events, out, max_turns)
    except RPCError as e:
        # A group member (`episodes.types.group`) names no workflow: its group's history.
        from episodes.client.group.history import load_member

        member = await load_member(client, workflow_id, max_turns=max_turns, tolerant=tolerant)
        if member is not None:
            return member
        raise EpisodesError(f"no episode {workflow_id!r}: {e.message}") from None
    return out


async def recorded_usage(client: Client, workflow_id: str) -> RecordedUsage:
    """The model calls and tokens an episode's history recorded, every run of it (a
    fork's parent turns left out: the parent spent them). For an episode whose workflow
    failed, which has no result: a batch's budget counts it (`BatchBudget`). What
    cannot be read counts as nothing: a budget is never a reason to fail."""
    try:
        data = await load_transcript(client, workflow_id, tolerant=True)
    except Exception:
        return RecordedUsage()
    turns = data["turns"][data.get("replayed_turns", 0) :]
    records = [TurnRecord.model_validate(t["record"]) for t in turns if not t.get("undecodable")]
    tokens, calls = records_usage(records)
    return RecordedUsage(model_tokens=tokens, model_calls=calls)


async def recorded_turns(client: Client, workflow_id: str, turns: int) -> list[TurnRecord]:
    """The first `turns` recorded turns of the episode's chain; fewer is an error."""
    data = await load_transcript(client, workflow_id, max_turns=turns)
    records = [TurnRecord.model_validate(t["record"]) for t in data["turns"][:turns]]
    if len(records) < turns:
        raise EpisodesError(
            f"episode {workflow_id}: its history holds {len(records)} turns, {turns} expected"
        )
    return records


async def _read_run(
    client: Client, events: Any, out: dict[str, Any], max_turns: int | None
) -> str | None:
    """Add one run's session, turns and result to `out`; the next run's id, if any."""
    scheduled: dict[int, str] = {}

    async def decode(payloads: list[Any], kind: Any, what: str, event_id: int) -> Any:
        if "undecodable" not in out:  # strict: a failure fails the read
            [value] = await client.data_converter.decode(payloads, [kind])
            return value
        try:
            [value] = await client.data_converter.decode(payloads, [kind])
            return value
        except Exception as e:  # PayloadKeyError, PayloadDecryptError, unknown encoding...
            first = (str(e) or type(e).__name__).splitlines()[0]
            out["undecodable"].append({"what": what, "event_id": event_id, "error": first})
            return None

    for ev in events:
        if ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED and out["task"] is None:
            started = ev.workflow_execution_started_event_attributes
            if started.workflow_type.name == contract.GROUP_WORKFLOW:
                raise EpisodesError(
                    f"{out['workflow_id']} is a group workflow: its members are "
                    f"{out['workflow_id']}.s0, .s1, ... (one a sample)"
                )
            payloads = list(ev.workflow_execution_started_event_attributes.input.payloads)
            if payloads:  # EpisodeInput or InteractiveInput: the task (and a fork's parent)
                inp = await decode(payloads[:1], dict, "input", ev.event_id)
                out["task"] = inp.get("task") if inp else None
                fork = (inp or {}).get("fork")
                if isinstance(fork, dict) and not out["turns"]:
                    await _add_parent_turns(client, out, fork, max_turns)
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = ev.activity_task_completed_event_attributes
            kind = scheduled.get(attrs.scheduled_event_id)
            payloads = list(attrs.result.payloads)
            if kind == contract.PROVISION and payloads:
                ref = await decode(payloads, SessionRef, kind, ev.event_id)
                out["session"] = ref.model_dump(mode="json") if ref else None
            elif kind == contract.RESTORE and payloads:  # the session after a restart
                restored = await decode(payloads, RestoreResult, kind, ev.event_id)
                if restored:
                    out.setdefault("restarts", []).append(restored.model_dump(mode="json"))
            elif kind == contract.TURN and payloads:  # an interactive session's step
                res = await decode(payloads, TurnResult, kind, ev.event_id)
                _add_turns(out, [res] if res else [], max_turns)
            elif kind == contract.DRIVE and payloads:  # its last turns, after its Updates
                drive = await decode(payloads, DriveResult, kind, ev.event_id)
                _add_turns(out, drive.turns if drive else [], max_turns)
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            req = ev.workflow_execution_update_accepted_event_attributes.accepted_request
            if req.input.name == contract.RECORD_TURNS:  # a batch of turns from the drive
                args = list(req.input.args.payloads)
                batch = await decode(args, list[TurnResult], contract.RECORD_TURNS, ev.event_id)
                if batch is None:
                    _add_placeholders(out, req.meta.update_id, max_turns)
                else:
                    _add_turns(out, batch, max_turns)
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payloads = list(ev.workflow_execution_completed_event_attributes.result.payloads)
            if payloads:
                res = await decode(payloads, EpisodeResult, "result", ev.event_id)
                out["result"] = res.model_dump(mode="json") if res else None
        elif ev.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return ev.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return None


async def _add_parent_turns(
    client: Client, out: dict[str, Any], fork: dict[str, Any], max_turns: int | None
) -> None:
    """A fork's branch: its first turns are its parent's (replayed, not in its history)."""
    k = int(fork.get("at_turn") or 0)
    if max_turns is not None:
        k = min(k, max_turns)
    parent = await load_transcript(client, str(fork["workflow_id"]), max_turns=k)
    out["turns"] = parent["turns"][:k]
    out["replayed_turns"] = len(out["turns"])
    out["forked_from"] = fork
    if out["session"] is None:
        out["session"] = parent["session"]  # the first message the branch replayed too


def _add_turns(out: dict[str, Any], results: list[TurnResult], max_turns: int | None) -> None:
    # A batch may repeat turns the workflow already held (it ignored them): so do we.
    for res in results:
        if max_turns is not None and len(out["turns"]) >= max_turns:
            return
        if res.record.turn == len(out["turns"]):
            out["turns"].append(res.model_dump(mode="json"))


def _add_placeholders(out: dict[str, Any], update_id: str, max_turns: int | None) -> None:
    """Stand-ins for the turns an undecodable Update carried: its id names them
    (`<session>:turns-<first>-<last>`, activities/recorder.py)."""
    span = update_id.rsplit(":turns-", 1)[-1].split("-")
    if len(span) != 2 or not all(p.isdigit() for p in span):
        return
    for turn in range(int(span[0]), int(span[1]) + 1):
        if max_turns is not None and len(out["turns"]) >= max_turns:
            return
        if turn == len(out["turns"]):
            out["turns"].append(
                {"record": {"turn": turn}, "observation": None, "undecodable": True}
            )
