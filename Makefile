# Two commands a user needs (README): `make demo` and `make test`.
# Each builds what it needs by itself on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
UV_VERSION := 0.13.8
# The machines of this project carry the CPU build of torch in /opt/wheels; uv ignores pip's config.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
# The venv's bin first on PATH for every recipe: spark-submit comes with the pyspark wheel there,
# and Airflow's Spark hook looks for it on PATH.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: demo test lint bench-accuracy bench-sizing lock services clean

# --compile-bytecode: as pip does by default. Where the interpreter runs with PYTHONDONTWRITEBYTECODE
# (this project's machines do) nothing else ever writes the .pyc files: every process would compile
# Airflow and SQLAlchemy from source again (a fresh process's first size(): 1.4 s instead of 0.6 s).
$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python $(FIND_LINKS) -r requirements.lock
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $@

demo: $(VENV)/.installed
	bash scripts/setup-services.sh java
	$(BIN)/bellamy demo

services: $(VENV)/.installed
	bash scripts/setup-services.sh

lint: $(VENV)/.installed
	$(BIN)/ruff check airflow_provider_bellamy dags_examples tests
	$(BIN)/ruff format --check airflow_provider_bellamy dags_examples tests

test: $(VENV)/.installed services lint
	$(BIN)/python -m pytest

bench-accuracy: $(VENV)/.installed
	$(BIN)/bellamy benchmark accuracy --dataset c3o --seeds 3 --json docs/results/accuracy-c3o.json

bench-sizing: $(VENV)/.installed
	$(BIN)/bellamy benchmark sizing --dataset c3o --json docs/results/sizing-c3o.json
	$(BIN)/bellamy benchmark sizing --dataset bell --json docs/results/sizing-bell.json

# Re-resolve the lock file (needs the package registries).
lock: $(VENV)/.installed
	$(UV) pip compile pyproject.toml --all-extras $(FIND_LINKS) --python-version 3.11 \
		-c lock-constraints.txt -o requirements.lock

clean:
	rm -rf $(VENV) .venv-flink .pytest_cache
