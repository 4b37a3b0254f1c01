"""One `limits` on every runtime, the old spellings still read (issue 28)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from episodes.types.runtime import (
    DockerConfig,
    Limits,
    ModalConfig,
    PrimeConfig,
    SubprocessConfig,
)

GIB, MIB = 2**30, 2**20


def test_every_runtime_takes_the_same_limits_with_bounded_defaults():
    for config in (SubprocessConfig(), DockerConfig(), ModalConfig(), PrimeConfig()):
        assert config.limits == Limits()
    limits = Limits()
    assert limits.memory <= 2 * GIB and limits.processes <= 512 and limits.disk <= 2 * GIB
    raised = SubprocessConfig.model_validate({"limits": {"memory": "8GiB", "processes": 4096}})
    assert (raised.limits.memory, raised.limits.processes) == (8 * GIB, 4096)


@pytest.mark.parametrize(
    ("given", "size"),
    [("64m", 64 * MIB), ("2g", 2 * GIB), ("1GiB", GIB), ("512MB", 512 * MIB), (4096, 4096)],
)
def test_sizes_take_dockers_notation(given, size):
    assert Limits(memory=given).memory == size


@pytest.mark.parametrize("bad", ["lots", "-1m", 0, "1.5x"])
def test_a_bad_size_says_how_to_write_one(bad):
    with pytest.raises(ValidationError):
        Limits(disk=bad)


def test_the_old_spellings_are_aliases():
    docker = DockerConfig.model_validate({"memory": "64m", "pids_limit": 64, "cpus": 0.5})
    assert docker.limits == Limits(memory=64 * MIB, processes=64, cpus=0.5)
    assert (docker.memory, docker.pids_limit, docker.cpus) == (64 * MIB, 64, 0.5)
    # Beside `limits`, an old spelling fills what `limits` leaves out.
    both = DockerConfig.model_validate({"memory": "1g", "limits": {"disk": "1g"}})
    assert (both.limits.memory, both.limits.disk) == (GIB, GIB)
    modal = ModalConfig(cpu=2.0, memory_mb=2048)  # type: ignore[call-arg]
    assert (modal.limits.cpus, modal.limits.memory, modal.memory_mb) == (2.0, 2 * GIB, 2048)
    prime = PrimeConfig(cpu_cores=2, memory_gb=4, disk_size_gb=10)  # type: ignore[call-arg]
    assert (prime.cpu_cores, prime.memory_gb, prime.disk_size_gb) == (2, 4, 10)
    assert prime.limits.disk == 10 * GIB


def test_a_spec_round_trips_through_its_dump():
    docker = DockerConfig.model_validate({"memory": "64m"})
    assert DockerConfig.model_validate(docker.model_dump()) == docker
