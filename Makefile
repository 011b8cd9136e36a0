# Logbus: `make run` starts one broker, `make test` runs everything CI runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

HOST     ?= 127.0.0.1
PORT     ?= 8080
DATA_DIR ?= ./data
KAFKA_LISTENER ?= 127.0.0.1:9092

.PHONY: install run cluster test lint unit bench clean openapi java curl wrk redis-server zookeeper pipeline chromium kcat

# $(call apt,COMMAND,PACKAGE): install PACKAGE from Debian when COMMAND is missing (root only).
apt = @command -v $(1) >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(2); \
	  else echo "$(1) missing: run 'sudo apt-get install $(2)'"; exit 1; fi; }

# $(call apt_file,FILE,PACKAGE): the same for a package that puts no command on PATH.
apt_file = @test -e $(1) || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(2); \
	  else echo "$(1) missing: run 'sudo apt-get install $(2)'"; exit 1; fi; }

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# setup.py and the C sources: the extensions are rebuilt when they change.
$(STAMP): pyproject.toml setup.py app/client/producer/_native.c app/common/_jsonrecords.c app/common/schemas/_avroenc.c app/common/schemas/_avrodec.c app/common/schemas/_avroprogram.h | $(PY)
	$(PIP) install --quiet -e '.[test,bench,spark]'
	touch $(STAMP)
# The C extensions' shared header (Kafka's murmur2 and varints).
$(STAMP): app/common/_kafka_wire.h

install: $(STAMP)

run: install
	$(VENV)/bin/logbus serve --data-dir $(DATA_DIR) --host $(HOST) --port $(PORT) --kafka-listener $(KAFKA_LISTENER)

# ZooKeeper and three brokers (ports 8081-8083) on this machine, no Docker; Ctrl-C stops them.
cluster: install zookeeper
	HOST=$(HOST) bash scripts/local-cluster.sh

lint: install
	$(VENV)/bin/ruff check app logbus tests bench pipelines
	$(VENV)/bin/ruff format --check app logbus tests bench pipelines
	$(VENV)/bin/mypy

# The README test runs its curl examples; Spark's tests need Java; cluster tests need ZooKeeper;
# the browser tests (tests/e2e/test_e2e_browsers.py) need Chromium.
# TEST_WORKERS=0 runs the suite in this one process (e.g. to read output in order, or pdb).
TEST_WORKERS ?= 2
test: install lint java curl zookeeper chromium kcat
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=30 tests

# Debian's redis-server is the standing baseline; installed when missing (root only).
redis-server:
	$(call apt,redis-server,redis-server)

curl:
	$(call apt,curl,curl)

# Debian's headless-capable Chromium for the CORS/Origin tests (a page from another origin).
chromium:
	$(call apt,chromium,chromium)

# Debian's kcat (librdkafka's command line) for the Kafka door's README example
# (tests/integration/kafka/test_kafka_readme.py).
kcat:
	$(call apt,kcat,kcat)

# HTTP load for bench/http_edge.py (small requests at many connections).
wrk:
	$(call apt,wrk,wrk)

# Spark (the `spark` extra, tests/e2e/test_e2e_spark.py, `make pipeline`) runs on Java 17;
# installed when missing (root only).
java:
	$(call apt,java,openjdk-17-jre-headless)

# Cluster-mode tests (tests/e2e/zookeeper.py) run Debian's ZooKeeper 3.8 from its jars; it
# puts no command on PATH, so the check is the server jar. Installed when missing (root only).
zookeeper: java
	$(call apt_file,/usr/share/java/zookeeper.jar,zookeeper)

# Click events -> per-user sessions on local Spark against a broker it starts on a free port;
# checks the sessions against a plain-Python computation (pipelines/clicks_sessions.py).
pipeline: install java
	$(PY) -m pipelines.clicks_sessions

bench: install redis-server wrk java zookeeper
	$(PY) -m bench.run

openapi: install
	$(PY) -m app.api.openapi_dump > openapi/openapi.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
