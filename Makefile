# streamnb — the two commands of the README, and the steps they are made of.
#   make demo    set up, start local Kafka, run the daemon on a real sample stream, show accuracy
#   make test    set up, start local Kafka, run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-unit kafka-up kafka-down bench lint clean

setup: $(STAMP)

# setup.py and the C source too: an edit of the extension is rebuilt by the next `make setup`
$(STAMP): pyproject.toml setup.py streamnb/features/_tokens.c streamnb/features/_html_entities.h \
		streamnb/models/_step.c streamnb/daemon/_records.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,eval]'
	touch $(STAMP)

kafka-up:
	scripts/kafka.sh start

kafka-down:
	scripts/kafka.sh stop

demo: setup kafka-up
	$(PY) scripts/demo.py

test: setup kafka-up
	$(PY) -m pytest

test-unit: setup
	$(PY) -m pytest -m "not kafka"

bench: setup kafka-up
	$(PY) -m bench

lint: setup
	$(VENV)/bin/ruff check streamnb tests bench scripts

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
