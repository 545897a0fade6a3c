# Two set-up commands, both self-contained on a fresh machine with Python 3.11 and Java 17:
#   make run   - create .venv, install sparkmq, start the broker (sparkmq serve) on ./data
#   make test  - create .venv, install sparkmq with test extras, run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE_DIR ?= data
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: run test test-fast lint typecheck bench bench-deps clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --config-settings editable_mode=compat -e ".[kafka,test,dev]"
	touch $@

venv: $(VENV)/.installed

run: venv
	$(BIN)/sparkmq serve --store-dir $(STORE_DIR) --host $(HOST) --port $(PORT)

test: venv
	$(BIN)/python -m pytest -q

# The quick loop while editing (no Spark, no Spark cluster, no Kafka clients, no end-to-end kill tests);
# `make test` stays the full suite that CI runs.
test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow and not spark and not kafka and not spark_cluster"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# redis-py for bench/peers.py (the `bench` extra).
bench-deps: venv
	$(BIN)/pip install --quiet --config-settings editable_mode=compat -e ".[kafka,test,dev,bench]"

bench: bench-deps
	$(BIN)/python -m bench.store_bench
	$(BIN)/python -m bench.decode_bench
	$(BIN)/python -m bench.http_bench
	$(BIN)/python -m bench.kafka_bench
	$(BIN)/python -m bench.spark_bench
	$(BIN)/python -m bench.sink_bench
	$(BIN)/python -m bench.operators_bench --quick
	$(BIN)/python -m bench.transactions_bench
	$(BIN)/python -m bench.retry_bench
	$(BIN)/python -m bench.peers

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
