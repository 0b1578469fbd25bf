# Two entry points (README quickstart): `make run` and `make test`.
# Each creates/reuses the local virtual environment .venv from the pinned lock.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test venv lock clean-results

venv: $(STAMP)

$(STAMP): envs/requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r envs/requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# The whole default study (config/config.yaml); the workflow's default profile sets the cores.
run: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/snakemake
	@echo "Done. Open $(CURDIR)/reports/digits/index.html"

# Two pytest-xdist workers (a 2-core machine; TEST_WORKERS=0 runs in one process). loadgroup keeps
# the tests of one xdist group in one worker: tests/xdist_groups.py (hooked in by tests/conftest.py)
# puts every test that uses the SLURM cluster in group "study" and every test that uses the smoke
# study in group "smoke", so each starts once per session.
TEST_WORKERS ?= 2
test: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# Re-resolve the lock from pyproject.toml (needs the package registry).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -e '.[dev,diffusers]'
	{ sed -n '1,3p' envs/requirements.lock; .lock-venv/bin/pip freeze --exclude-editable | grep -v '^timestep-lab'; } > envs/requirements.lock.new
	mv envs/requirements.lock.new envs/requirements.lock && rm -rf .lock-venv
	$(PY) envs/conda_from_lock.py
