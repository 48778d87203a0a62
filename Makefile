# The two commands in the README (`make demo`, `make test`) each build .venv from uv.lock.
# uv is bootstrapped with pip when missing: pip takes minutes here, uv seconds.
SHELL := /bin/bash
PY := .venv/bin/python
UV := $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
UV_FLAGS := --system-certs

.PHONY: venv test test-fast lint typecheck check bench demo readme-demo clean browser prometheus

venv: .venv/.synced
.venv/.synced: pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 \
	  || { echo "bootstrapping uv with pip"; python3 -m pip install --quiet uv; }
	$(UV) sync $(UV_FLAGS) --frozen --extra dev
	@touch $@

lint: venv
	.venv/bin/ruff check --no-cache src tests benchmarks
	.venv/bin/mypy

check: venv
	.venv/bin/rlsight check

# The HTML report's tests drive a real headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The Prometheus endpoint's test scrapes it with a real Prometheus server (Debian's package).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { echo "installing Debian's prometheus for the scrape test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }

test: venv browser prometheus
	.venv/bin/ruff check --no-cache src tests benchmarks
	.venv/bin/mypy
	.venv/bin/rlsight check
	.venv/bin/pytest -q -p no:cacheprovider

# The inner loop while editing: no Ray, no browser, no collector, no Prometheus, nothing that
# takes seconds per test (the `slow` marker, see tests/conftest.py). `make test` runs it all.
test-fast: venv
	.venv/bin/pytest -q -p no:cacheprovider -m "not ray and not browser and not collector and not prometheus and not slow"

bench: venv
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

demo: venv
	$(PY) -m rlsight.demo

# The README's demo excerpt and docs/img/report.png come from a real default run, not typing.
readme-demo: venv browser
	$(PY) scripts/readme_demo.py

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache rlsight-runs
