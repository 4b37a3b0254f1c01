"""Each model call records the version of the weights that served it (issue 41 §1).

The sources, first that knows: the upstream's answer (a header or its
`system_fingerprint`, read by `model.policy_version_from`), the version the trainer
gave the replica (`model.upstreams[].policy_version`, the highest a worker has seen),
the dispatch version (`model.policy_version`). The proxy runs between the real OpenAI
client and the scripted upstream on loopback, which names its weights as a server
that reports them does.
"""

from __future__ import annotations

import openai
import pytest
from pydantic import ValidationError

from episodes.model.proxy import ModelProxy
from episodes.model.scripted.server import ScriptedUpstream
from episodes.types.events import ModelCall
from episodes.types.model import ModelSpec, PolicyVersionFrom, UpstreamSpec

pytestmark = pytest.mark.timeout(60)

HELLO = [{"role": "user", "content": "hello"}]
HEADER = {"header": "X-Policy-Version"}
FINGERPRINT = {"fingerprint_regex": r"scripted-v(\d+)"}


def _proxy(spec: ModelSpec, calls: list, session: str = "s") -> ModelProxy:
    return ModelProxy(spec, upstream_key="", on_call=calls.append, session_id=session)


async def _ask(proxy: ModelProxy, *, stream: bool = False) -> None:
    env = proxy.env()
    c = openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )
    if stream:
        async for _ in await c.chat.completions.create(model="x", messages=HELLO, stream=True):
            pass
    else:
        await c.chat.completions.create(model="x", messages=HELLO)
    await c.close()


def _versions(calls: list) -> list[tuple]:
    return [(c["policy_version"], c["policy_version_source"], c["dispatch_version"]) for c in calls]


# -- the rule ----------------------------------------------------------------------------


def test_the_rule_reads_a_header_or_the_fingerprint() -> None:
    rule = PolicyVersionFrom(header="X-Policy-Version")
    assert rule.read({"x-policy-version": "12"}, {}) == 12
    assert rule.read({"x-policy-version": "step-7"}, {}) == 7  # its first integer
    assert rule.read({"x-policy-version": "none"}, {}) is None
    assert rule.read({}, {"system_fingerprint": "scripted-v3"}) is None
    picked = PolicyVersionFrom(header="x-w", header_regex=r"v(\d+)@")
    assert picked.read({"x-w": "2024-v9@node1"}, None) == 9
    both = PolicyVersionFrom(header="x-v", fingerprint_regex=r"policy-(\d+)$")
    assert both.read({}, {"system_fingerprint": "fp_1-policy-4"}) == 4
    assert both.read({"x-v": "5"}, {"system_fingerprint": "fp_1-policy-4"}) == 5  # header first
    assert both.read({}, {"system_fingerprint": "fp_44709d6fcb"}) is None
    whole = PolicyVersionFrom(fingerprint_regex=r"\d+$")
    assert whole.read({}, {"system_fingerprint": "w17"}) == 17


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give header, fingerprint_regex or both"),
        ({"header_regex": r"(\d+)"}, "header_regex needs header"),
        ({"fingerprint_regex": "("}, "not a regular expression"),
        ({"fingerprint_regex": r"(\d+)-(\d+)"}, "at most one group"),
        ({"header": "x", "nope": 1}, "Extra inputs"),
    ],
)
def test_a_bad_rule_says_what_to_fix(fields, message) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelSpec(base_url="http://h/v1", model="m", policy_version_from=fields)


def test_specs_and_records_from_before_load() -> None:
    spec = ModelSpec.model_validate(
        {"upstreams": [{"base_url": "http://a/v1", "weight": 1}], "model": "m"}
    )
    assert spec.policy_version_from is None and spec.targets()[0].policy_version is None
    old = ModelCall.model_validate({"kind": "model_call", "policy_version": 3})
    assert (old.policy_version, old.policy_version_source, old.dispatch_version) == (
        3,
        "dispatch",
        3,
    )
    none = ModelCall.model_validate({"kind": "model_call"})
    assert (none.policy_version, none.policy_version_source, none.dispatch_version) == (
        None,
        None,
        None,
    )
    new = ModelCall.model_validate(
        {
            "kind": "model_call",
            "policy_version": 5,
            "policy_version_source": "upstream",
            "dispatch_version": None,
        }
    )
    assert (new.policy_version, new.policy_version_source, new.dispatch_version) == (
        5,
        "upstream",
        None,
    )


# -- through the proxy -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("rule", [HEADER, FINGERPRINT])
async def test_the_answer_names_the_weights(rule, stream) -> None:
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi", policy_version=4) as up:
        spec = ModelSpec(
            base_url=up.base_url, model="m", policy_version=2, policy_version_from=rule
        )
        async with _proxy(spec, calls) as proxy:
            await _ask(proxy, stream=stream)
            up.policy_version = 5  # the trainer pushed weights between two calls
            await _ask(proxy, stream=stream)
            up.policy_version = None  # a server that stopped saying: the dispatch version
            await _ask(proxy, stream=stream)
    assert _versions(calls) == [(4, "upstream", 2), (5, "upstream", 2), (2, "dispatch", 2)]
    assert [s["policy_version"] for s in up.served] == [4, 5, None]


async def test_no_rule_no_version_records_none() -> None:
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi", policy_version=4) as up:
        async with _proxy(ModelSpec(base_url=up.base_url, model="m"), calls) as proxy:
            await _ask(proxy)
    assert _versions(calls) == [(None, None, None)]  # an answer is read only by a rule


async def test_the_replica_version_reaches_sessions_already_running() -> None:
    """A trainer pushes weights to a replica and dispatches with its new version: the
    worker's sessions on that replica record the new version from their next call. The
    latest declaration wins, not the latest session: a session restarted (or started
    late) from an older spec takes nothing back; a new training run's does."""
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi") as up:

        def spec(replica: int | None, dispatch: int, at: float | None) -> ModelSpec:
            fleet = [
                UpstreamSpec(base_url=up.base_url, policy_version=replica, policy_version_at=at)
            ]
            return ModelSpec(upstreams=fleet, model="m", policy_version=dispatch)

        async with _proxy(spec(4, 4, 100.0), calls, "running") as running:
            await _ask(running)
            async with _proxy(spec(5, 5, 200.0), [], "next"):  # the next dispatch's session
                pass
            await _ask(running)
            async with _proxy(spec(4, 4, 150.0), [], "late"):  # dispatched before, started now
                pass
            await _ask(running)
            async with _proxy(spec(0, 0, 300.0), [], "new-run"):  # a new training run
                pass
            await _ask(running)
        async with _proxy(spec(None, 1, None), calls, "unversioned") as later:
            await _ask(later)  # a spec that names no version leaves the replica's
    assert _versions(calls) == [
        (4, "replica", 4),
        (5, "replica", 4),
        (5, "replica", 4),
        (0, "replica", 4),
        (0, "replica", 1),
    ]


async def test_unstamped_declarations_lose_to_stamped_ones_and_the_highest_wins() -> None:
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi") as up:

        def spec(replica: int, at: float | None) -> ModelSpec:
            fleet = [
                UpstreamSpec(base_url=up.base_url, policy_version=replica, policy_version_at=at)
            ]
            return ModelSpec(upstreams=fleet, model="m")

        async with _proxy(spec(3, None), calls) as proxy:
            await _ask(proxy)
            async with _proxy(spec(2, None), []):
                pass
            await _ask(proxy)
            async with _proxy(spec(1, 10.0), []):
                pass
            await _ask(proxy)
            async with _proxy(spec(7, None), []):
                pass
            await _ask(proxy)
    assert [c["policy_version"] for c in calls] == [3, 3, 1, 1]


def test_dispatch_stamps_the_replicas_versions() -> None:
    from episodes.client.batch.dispatch import dispatch_spec
    from episodes.types.spec import parse_spec

    spec = parse_spec(
        {
            "name": "f",
            "env": "kv-store",
            "tasks": [{"id": "t"}],
            "harness": {"command": "x"},
            "model": {"base_url": "http://old/v1", "model": "m"},
        }
    )
    fleet = [
        UpstreamSpec(base_url="http://a/v1", policy_version=3),
        UpstreamSpec(base_url="http://b/v1", policy_version=2, policy_version_at=5.0),
        UpstreamSpec(base_url="http://c/v1"),
    ]
    first = dispatch_spec(spec, 3, fleet)
    second = dispatch_spec(spec, 3, fleet)
    assert first.model is not None and second.model is not None
    a1, b1, c1 = first.model.targets()
    a2, _, _ = second.model.targets()
    assert a1.policy_version_at is not None and a2.policy_version_at is not None
    assert a1.policy_version_at <= a2.policy_version_at  # a later dispatch: a later stamp
    assert (b1.policy_version_at, c1.policy_version_at) == (5.0, None)  # given; no version
    assert fleet[0].policy_version_at is None  # the trainer's list is left as it was


async def test_the_answer_outranks_the_replica() -> None:
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi", policy_version=9) as up:
        fleet = [UpstreamSpec(base_url=up.base_url, policy_version=8)]
        spec = ModelSpec(upstreams=fleet, model="m", policy_version=7, policy_version_from=HEADER)
        async with _proxy(spec, calls) as proxy:
            await _ask(proxy)
            up.policy_version = None
            await _ask(proxy)
    assert _versions(calls) == [(9, "upstream", 7), (8, "replica", 7)]


async def test_a_failed_call_records_what_is_known() -> None:
    calls: list = []
    async with ScriptedUpstream(policy=lambda m, t: "hi", policy_version=3) as up:
        up.always_fail = 500
        spec = ModelSpec(
            base_url=up.base_url, model="m", policy_version=2, policy_version_from=HEADER, retries=0
        )
        async with _proxy(spec, calls) as proxy:
            with pytest.raises(openai.APIStatusError):
                await _ask(proxy)
    assert calls[0]["status"] == 502 and _versions(calls) == [(2, "dispatch", 2)]
