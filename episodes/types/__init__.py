"""The types floor: every model that crosses the workflow boundary, and nothing else.

Pydantic and the standard library only (and `episodes.errors`, itself standard
library only): workflows import these modules, and the workflow sandbox must load
them deterministically. `tests/episodes/test_layering.py` checks that transitively.

- `results`: tasks, turn records, outcomes, scores, transcripts, episode results
- `io`: inputs, state and outputs of the workflows and their activities
- `spec`: episode specs (with `runtime` and `model`, the box and model configs)
- `metrics`: a batch's metrics (pass@k, duration sketches)
- `tuning`: the shared tuning defaults

The modules are imported by name (`from episodes.types.results import Task`); this
package imports none of them itself, so reading a constant from `tuning` loads no
pydantic.
"""
