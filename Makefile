# Set-up commands, each self-contained on a fresh machine with Python 3.11 and Java 17:
#   make run     - create .venv, install sparkmq, start the broker (sparkmq serve) on ./data
#   make cluster - the same for a cluster: ZooKeeper (installed with apt when missing) and two
#                  replica groups of two (b1-1/b1-2, b2-1/b2-2) with their operator jobs on
#                  127.0.0.1; Ctrl-C stops it all (CLUSTER_REPLICAS=1 CLUSTER_BROKERS=3: three
#                  brokers without replicas)
#   make test    - create .venv, install sparkmq with test extras, run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE_DIR ?= data
HOST ?= 127.0.0.1
PORT ?= 8080
# make cluster: members b1-1.. on HTTP ports CLUSTER_PORT.. (HA ports +100), ZooKeeper on ZK_PORT, all data and
# logs under CLUSTER_DIR (kept between runs); OPERATORS=off runs the brokers without Spark jobs.
CLUSTER_DIR ?= cluster-data
# make cluster SECURE=1: auth, broker identities, ZooKeeper ACLs and mutual TLS on the HA ports,
# with a throw-away CA and secrets under $(CLUSTER_DIR)/secure (docs/security.md).
SECURE ?=
CLUSTER_BROKERS ?= 2
# Members per broker name: 2 makes each a replica group (a master and a slave, docs/replication.md).
CLUSTER_REPLICAS ?= 2
CLUSTER_PORT ?= 8081
ZK_PORT ?= 2181
OPERATORS ?= local
ZOOKEEPER_JAR := /usr/share/java/zookeeper.jar
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run cluster zookeeper test test-fast lint typecheck bench bench-deps clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet --config-settings editable_mode=compat -e ".[kafka,grpc,test,dev]"
	touch $@

venv: $(VENV)/.installed

run: venv
	$(BIN)/sparkmq serve --store-dir $(STORE_DIR) --host $(HOST) --port $(PORT)

# Debian's zookeeper package (ZooKeeper 3.8 on the Java Spark already needs), when missing.
zookeeper:
	@test -f $(ZOOKEEPER_JAR) || { \
	  echo "ZooKeeper not found: installing Debian's zookeeper package" >&2; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; }

cluster: venv zookeeper
	$(BIN)/sparkmq cluster local --brokers $(CLUSTER_BROKERS) --replicas $(CLUSTER_REPLICAS) \
	    --port $(CLUSTER_PORT) --zk-port $(ZK_PORT) --operators $(OPERATORS) --dir $(CLUSTER_DIR) \
	    $(if $(SECURE),--secure $(CLUSTER_DIR)/secure)

# Two pytest processes (pytest-xdist), each given whole test files (module fixtures stay shared):
# the Spark, kill and failover tests spend most of their time waiting on Spark's start, timers and
# elections. PYTEST_WORKERS=0 runs the suite in one process. (Putting the heaviest files first
# was tried and was slower: the Spark kill tests then run side by side on both processes and
# slow each other down; xdist's own order mixes them with quick files.) The tests that run several
# Spark jobs at once take turns across the two processes (tests/support/turns.py).
PYTEST_WORKERS ?= 2
test: venv
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The quick loop while editing (no Spark, no Spark cluster, no Kafka clients, no end-to-end kill tests);
# `make test` stays the full suite that CI runs.
test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow and not spark and not kafka and not cluster and not spark_cluster"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# redis-py for bench/peers.py (the `bench` extra).
bench-deps: venv
	$(BIN)/pip install --quiet --config-settings editable_mode=compat -e ".[kafka,grpc,test,dev,bench]"

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
	$(BIN)/python -m bench.ha_bench
	$(BIN)/python -m bench.peers

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
