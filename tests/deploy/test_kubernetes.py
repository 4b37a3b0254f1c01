"""The Kubernetes manifests (deploy/kubernetes/): valid against the Kubernetes API
schemas, offline (kubernetes-validate ships them), and consistent with the worker they
run: the drain fits the grace period, the budget and the autoscaler select the
Deployment's pods, the autoscaler's metric is one the worker exports, the sandbox gets
what the image's entrypoint needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from activities import telemetry
from episodes.client.config import Settings

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (in .[dev])"
)

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
# The oldest release whose API these use (hostUsers, autoscaling/v2, policy/v1), and
# the newest the installed schemas know.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def documents() -> dict[str, dict[str, Any]]:
    docs = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            docs[doc["kind"]] = doc
    return docs


def test_there_are_manifests_for_the_workers() -> None:
    assert {"Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"} <= set(documents())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_the_manifests_are_valid_kubernetes(path: Path, version: str) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        # strict: a field the schema does not know (a typo) is an error too.
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_catches_a_misspelt_field() -> None:
    deployment = documents()["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    pod["terminationGracePeriod"] = pod.pop("terminationGracePeriodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def _worker() -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = documents()["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_grace_period_outlasts_the_drain() -> None:
    pod, container = _worker()
    drain = float(_env(container).get("EPISODES_DRAIN_TIMEOUT_S", Settings().drain_timeout_s))
    # The drain, then stopping every box (a cloud delete is retried with backoff).
    assert pod["terminationGracePeriodSeconds"] >= drain + 30


def test_the_budget_and_the_autoscaler_select_the_workers() -> None:
    docs = documents()
    deployment = docs["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    # A rollout never goes below the wanted replicas; the budget lets one go at a time.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_the_autoscaler_scales_on_a_metric_the_worker_exports() -> None:
    hpa = documents()["HorizontalPodAutoscaler"]
    (metric,) = hpa["spec"]["metrics"]
    name = metric["pods"]["metric"]["name"]
    exported = {m.name for m in telemetry.REGISTRY.collect()}
    assert name in exported
    _, container = _worker()
    args = container["args"]
    max_sessions = int(args[args.index("--max-sessions") + 1])
    assert 0 < float(metric["pods"]["target"]["averageValue"]) < max_sessions
    env = _env(container)
    assert env["EPISODES_METRICS_HOST"] == "0.0.0.0"
    assert {"name": "metrics", "containerPort": int(env["EPISODES_METRICS_PORT"])} in container[
        "ports"
    ]


def test_the_sandbox_gets_what_the_entrypoint_needs() -> None:
    pod, container = _worker()
    sc = container["securityContext"]
    # Started as root with SYS_ADMIN, in a pod user namespace; the entrypoint drops to
    # uid 10001 with no capabilities itself.
    assert sc["runAsUser"] == 0 and pod["hostUsers"] is False
    assert "SYS_ADMIN" in sc["capabilities"]["add"] and sc["capabilities"]["drop"] == ["ALL"]
    assert {"SETUID", "SETGID", "CHOWN"} <= set(sc["capabilities"]["add"])
    assert sc["privileged"] is False
    # The sandbox's namespaces, the remount, and its fresh /proc in each box.
    assert sc["seccompProfile"] == {"type": "Unconfined"} and sc["procMount"] == "Unmasked"
    assert sc["appArmorProfile"] == {"type": "Unconfined"}
    # The boxes' cgroups are inside the pod's: no pod memory limit below their sum.
    assert "memory" not in container["resources"].get("limits", {})
    assert pod["automountServiceAccountToken"] is False
