# Two commands a newcomer needs: `make demo` and `make test`. Everything else is optional.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# verifiers (the `verifiers` extra) pins mcp 2.0 and openai < 3: its own venv, where the
# `episodes-vf` environment runs under verifiers' env server (docs/integrations/verifiers.md).
VF_VENV := .venv-verifiers

.PHONY: venv test demo docs lint fmt bench learn clean

venv: $(STAMP)

# Re-install when the project metadata changes; otherwise reuse the venv.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[dev,docs,openenv]'
	@test -x $(VF_VENV)/bin/python || $(PY) -m venv $(VF_VENV)
	@$(VF_VENV)/bin/python -m pip install -q --upgrade pip
	@$(VF_VENV)/bin/python -m pip install -q -e '.[verifiers]'
	@touch $(STAMP)

# The type check runs here too: CI runs `make test`, so it enforces it. The suite runs on
# TEST_WORKERS processes (pytest-xdist; each has its own dev server and worker): most of
# a test's time is spent waiting on servers and processes, so more processes than cores
# pay. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 4
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -ra --durations=25 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal) $(PYTEST_ARGS)

# The demo's Temporal dev server: free ports unless PORT=7233 (say) asks for one.
demo: $(STAMP)
	$(BIN)/python -m episodes.demo $(if $(PORT),--port $(PORT))

# The docs site (docs/, mkdocs.yml) into site/; --strict: a broken link or reference fails.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# An end-to-end RL run on a CPU (docs/learn.md): learn/summary.json and learn/reward.png.
# The `learn` extra (numpy, matplotlib) is installed into the venv on first use.
learn: $(STAMP)
	@$(BIN)/python -c "import numpy, matplotlib" 2>/dev/null || $(BIN)/python -m pip install -q -e '.[learn]'
	$(BIN)/python -m learn $(LEARN_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check episodes episodes_vf activities workflows workers tests bench examples learn
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format episodes episodes_vf activities workflows workers tests bench examples learn

clean:
	rm -rf $(VENV) $(VF_VENV) .episodes .pytest_cache site
