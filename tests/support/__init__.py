"""What the tests share and no test collects: helpers, environments and specs
(`helpers`, `envs`), the harness programs the tests run (`harnesses/`), checks on real
processes (`procs`), `episodes` processes (`worker_procs`), the runtime backends and
cloud-SDK fakes (`backends/`, `fakes/`), the Harbor test dataset (`harbor/`), the MCP
stand-ins, the chaos tests' workers (`chaos/`), and the fixtures `tests/conftest.py`
loads for every test (`fixtures`, `chaos.fixtures`)."""

from __future__ import annotations

from pathlib import Path

HARNESSES = Path(__file__).resolve().parent / "harnesses"
