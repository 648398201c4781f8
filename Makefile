# Two commands for a new user: `make run` (the service on the bundled example) and `make test`.
# Both create .venv and install the project into it on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test unit e2e lint docs bench cluster-up cluster-down clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/kube-gpu-extender serve --snapshot examples/cluster.yaml --config examples/config.yaml --log-format text

# Everything: unit tests, then the end-to-end suite against a real control plane (tests/e2e; the
# Kubernetes binaries come from KUBE_BIN_DIR, default ../shared/k8s; skipped with a message if absent,
# failed instead with KUBE_E2E_REQUIRED=1, as in CI).
test: $(VENV)/.installed
	$(PY) -m pytest

unit: $(VENV)/.installed
	$(PY) -m pytest --ignore=tests/e2e

e2e: $(VENV)/.installed
	$(PY) -m pytest tests/e2e

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Try it yourself: the e2e suite's control plane (etcd, kube-apiserver, kube-scheduler with
# deploy/kube-scheduler-config.yaml, the extender) with the nodes of examples/cluster.yaml, kept
# running on 127.0.0.1 for kubectl (KUBECONFIG=.cluster/kubeconfig); cluster-down stops it.
cluster-up: $(VENV)/.installed
	$(PY) -m tests.e2e.localcluster up

cluster-down: $(VENV)/.installed
	$(PY) -m tests.e2e.localcluster down

# The documentation site: docs/ built into site/ (open site/index.html). --strict: a broken link, a
# missing page or a missing included example fails the build. The configuration reference page is
# generated from the code first.
docs: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[docs]'
	$(PY) -m app.config_reference
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m bench.latency

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info site
