"""Reading a spec file (YAML or JSON) into an `EpisodeSpec`.

Apart from `episodes.types.spec` because it loads a YAML parser, which the workflow
sandbox has no business importing.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from episodes.errors import SpecError
from episodes.types.spec import EpisodeSpec, parse_spec


def load_spec(path: str | Path) -> EpisodeSpec:
    """Read a YAML or JSON spec file."""
    p = Path(path)
    if not p.exists():
        raise SpecError(f"{p}: spec file not found")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except Exception as e:  # yaml.YAMLError / JSONDecodeError: one clear line
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"{p}: cannot parse ({first})") from None
    return parse_spec(data, source=str(p), base_dir=p.parent)
