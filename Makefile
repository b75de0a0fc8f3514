# Makefile for feed (github.com/feedhq/feed).
#
# Database discovery (shared by every target that needs MySQL):
#
#   tests (test, test-console, bench, crash) -- FEED_TEST_MYSQL_DSN, a DSN *without* a
#   database name, e.g. root@tcp(127.0.0.1:3307)/:
#     1. FEED_TEST_MYSQL_DSN set      -> use it
#     2. else docker answers          -> leave it unset; the Go tests start a
#                                        MySQL 8.4 testcontainer themselves
#     3. else                         -> .ci/localdb.sh (project-private
#                                        MariaDB under .data/, port 3307)
#
#   service (run, migrate) -- FEED_MYSQL_DSN, a DSN *with* the database name,
#   e.g. root@tcp(127.0.0.1:3307)/feed:
#     1. FEED_MYSQL_DSN set           -> go run ./cmd/feedd ...
#     2. else docker answers          -> docker compose (docker-compose.yml)
#     3. else                         -> .ci/localdb.sh, database "feed"
#
# Set NO_DOCKER=1 to skip the docker probe.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO         ?= go
GOFMT      ?= gofmt
DOCKER     ?= docker
# "docker compose" (plugin) if available, else docker-compose (v1).
COMPOSE    ?= $(shell if $(DOCKER) compose version >/dev/null 2>&1; then echo "$(DOCKER) compose"; \
	elif command -v docker-compose >/dev/null 2>&1; then echo docker-compose; else echo "$(DOCKER) compose"; fi)
TESTFLAGS  ?=
BENCHFLAGS ?=
NO_DOCKER  ?=
# Database name used by run/migrate against the local server.
FEED_DB    ?= feed

# Go is installed in /usr/local/go on the CI machines; use it if go is not on
# PATH already.
ifeq ($(shell command -v $(GO) 2>/dev/null),)
ifneq ($(wildcard /usr/local/go/bin/go),)
export PATH := /usr/local/go/bin:$(PATH)
endif
endif

# Shell condition: true when a Docker engine answers (quietly, short timeout).
DOCKER_OK = { [ -z "$(NO_DOCKER)" ] && command -v $(DOCKER) >/dev/null 2>&1 && \
	timeout 5 $(DOCKER) info >/dev/null 2>&1; }

# Shell snippet: discover the test database and export FEED_TEST_MYSQL_DSN
# for this recipe line and every sub-process. Prefix a recipe line with it.
WITH_TEST_DB = \
	if [ -n "$${FEED_TEST_MYSQL_DSN:-}" ]; then \
		echo "make $@: using FEED_TEST_MYSQL_DSN from the environment ($$FEED_TEST_MYSQL_DSN)"; \
	elif $(DOCKER_OK); then \
		unset FEED_TEST_MYSQL_DSN; \
		echo "make $@: docker answers; FEED_TEST_MYSQL_DSN unset, tests use a MySQL 8.4 testcontainer"; \
	else \
		FEED_TEST_MYSQL_DSN="$$(.ci/localdb.sh)"; \
		echo "make $@: no DSN and no docker; using local server from .ci/localdb.sh ($$FEED_TEST_MYSQL_DSN)"; \
	fi; \
	export FEED_TEST_MYSQL_DSN;

# $(call run_feedd,<command for the docker path>,<feedd arguments>)
# Discover the service database and run feedd against it.
run_feedd = \
	if [ -n "$${FEED_MYSQL_DSN:-}" ]; then \
		echo "make $@: using FEED_MYSQL_DSN from the environment"; \
	elif $(DOCKER_OK); then \
		echo "make $@: docker answers; using docker compose ($(1))"; \
		exec $(1); \
	else \
		FEED_MYSQL_DSN="$$(.ci/localdb.sh start $(FEED_DB))"; \
		export FEED_MYSQL_DSN; \
		echo "make $@: no DSN and no docker; using local server from .ci/localdb.sh ($$FEED_MYSQL_DSN)"; \
	fi; \
	exec $(GO) run ./cmd/feedd $(2)

.PHONY: help
help: ## Show this help
	@echo "Usage: make <target> [GO=go] [TESTFLAGS=...] [BENCHFLAGS=...] [NO_DOCKER=1]"
	@echo
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "} {printf "  %-13s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run feedd serve (FEED_MYSQL_DSN, else docker compose, else local MariaDB)
	@$(call run_feedd,$(COMPOSE) up --build,serve)

.PHONY: migrate
migrate: ## Run feedd migrate (same database discovery as run)
	@$(call run_feedd,$(COMPOSE) run --rm feedd go run ./cmd/feedd migrate,migrate)

.PHONY: build
build: ## Build bin/feedd
	$(GO) build -o bin/feedd ./cmd/feedd

# Shell snippet: the DSN of a server with MyRocks and deploy/rocksdb.cnf for
# the rocksdb passes: FEED_TEST_ROCKSDB_DSN, else .ci/localdb.sh on port 3308
# (which installs mariadb-plugin-rocksdb when missing).
ROCKSDB_DSN = { if [ -n "$${FEED_TEST_ROCKSDB_DSN:-}" ]; then echo "$$FEED_TEST_ROCKSDB_DSN"; \
	else FEED_INBOX_ENGINE=rocksdb FEED_LOCAL_DB_PORT=3308 .ci/localdb.sh; fi; }

# The suites that run again with the inbox in MyRocks: the store and the
# service, the SIGKILL crash tests and the online reshard under load. The
# reshard's three moves under load take from under two minutes to over
# fifteen on MyRocks here (its feed checks poll until the feeds converge):
# the bound catches a hang, not a slow run.
ROCKSDB_TESTS = \
	FEED_TEST_INBOX_ENGINE=rocksdb $(GO) test -count=1 -timeout 15m $(TESTFLAGS) ./store/... ./service && \
	FEED_TEST_INBOX_ENGINE=rocksdb $(GO) test -count=1 -timeout 25m -run 'TestCrash|^TestReshard$$' $(TESTFLAGS) ./cmd/feedd

# The packages test-race runs: the concurrent ones (workers, caches, the
# HTTP server and its streams) and the domain types. cmd/feedd's tests run
# feedd as a child process, which the race detector does not see into, and
# its crash tests time their kills by the child's progress, which the
# detector's slowdown of the test process throws off.
RACE_PKGS = . ./store/... ./service ./httpapi/...

.PHONY: test
test: vet ## go vet + go test ./... against a discovered MySQL/MariaDB (the MyRocks pass is make test-rocksdb, the quick benchmark make test-bench; CI runs both)
	@$(WITH_BENCH_TOOLS) \
	$(WITH_ROCKSDB_PLUGIN) \
	$(WITH_TEST_DB) \
	set -x; $(GO) test -count=1 -timeout 15m $(TESTFLAGS) ./...

.PHONY: test-bench
test-bench: ## Run the whole benchmark at tiny sizes (cmd/feedbench's TestQuick, build tag bench) against a discovered MySQL/MariaDB, with wrk and Redis
	@$(WITH_BENCH_TOOLS) $(WITH_TEST_DB) \
	set -x; $(GO) test -tags bench -count=1 -timeout 20m -run TestQuick $(TESTFLAGS) ./cmd/feedbench

.PHONY: test-race
test-race: ## go test -race of the store, service and HTTP packages against a discovered MySQL/MariaDB (needs cgo and a C compiler)
	@$(WITH_ROCKSDB_PLUGIN) \
	$(WITH_TEST_DB) \
	set -x; $(GO) test -race -count=1 -timeout 60m $(TESTFLAGS) $(RACE_PKGS)

.PHONY: test-rocksdb
test-rocksdb: ## The store, service, crash and reshard tests with the inbox in MyRocks (FEED_TEST_ROCKSDB_DSN, else a local MariaDB on 3308 with deploy/rocksdb.cnf)
	@export FEED_TEST_MYSQL_DSN="$$($(ROCKSDB_DSN))"; \
	set -x; $(ROCKSDB_TESTS)

# bin/tidbtest: an in-process TiDB that runs a command against itself.
.PHONY: tidbtest
tidbtest:
	cd tidbtest && $(GO) build -o ../bin/tidbtest .

.PHONY: test-tidb
test-tidb: tidbtest ## go test ./... (crash tests included) on an in-process TiDB (tidbtest/; cold build ~7 min, ~2 GB cache)
	@$(WITH_ROCKSDB_PLUGIN) $(WITH_BENCH_TOOLS) true
	@# One package at a time, and the process tests of cmd/feedd one at a time: the in-process
	@# TiDB takes most of 2 CPUs, and the crash tests' 1 s leases and the shard-down test's 500 ms
	@# probes need it answering within them.
	bin/tidbtest -- $(GO) test -count=1 -p 1 -timeout 40m $(TESTFLAGS) $$($(GO) list ./... | grep -v '/cmd/feedd$$')
	bin/tidbtest -- $(GO) test -count=1 -parallel 1 -timeout 40m $(TESTFLAGS) ./cmd/feedd

.PHONY: test-console
test-console: ## Drive the console in headless Chromium against feedd (installs Debian's chromium if missing)
	@if ! command -v chromium >/dev/null 2>&1; then \
		[ "$$(id -u)" -eq 0 ] || { echo "make $@: chromium is missing: apt-get install chromium (as root)"; exit 1; }; \
		echo "make $@: installing Debian's chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null; \
	fi
	@$(WITH_TEST_DB) \
	set -x; $(GO) vet -tags console ./httpapi/console/browser/ && \
	$(GO) test -count=1 -tags console -timeout 10m $(TESTFLAGS) ./httpapi/console/browser/

# Shell snippet: MariaDB's MyRocks plugin (mariadb-plugin-rocksdb), which
# the tests that start throwaway MyRocks servers beside the InnoDB ones
# (engine conversion, a crash mid-fan-out) and bench-disk load, installed
# when missing.
WITH_ROCKSDB_PLUGIN = \
	if command -v dpkg-query >/dev/null 2>&1 && ! dpkg-query -W -f='$${Status}' mariadb-plugin-rocksdb 2>/dev/null | grep -q "ok installed"; then \
		[ "$$(id -u)" -eq 0 ] || { echo "make $@: install mariadb-plugin-rocksdb (as root)"; exit 1; }; \
		echo "make $@: installing mariadb-plugin-rocksdb"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-plugin-rocksdb >/dev/null; \
	fi;

# Shell snippet: what feedbench's phases W and O drive besides feedd (and
# TestQuick runs them): Debian's wrk, the external load generator, and a
# Redis on 127.0.0.1:6379 for the Redis anchor, installed and started when
# missing. Redis is the benchmark's only; the service never uses it.
WITH_BENCH_TOOLS = \
	if ! command -v wrk >/dev/null 2>&1; then \
		[ "$$(id -u)" -eq 0 ] || { echo "make $@: wrk is missing: apt-get install wrk (as root)"; exit 1; }; \
		echo "make $@: installing Debian's wrk"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; \
	fi; \
	if ! { command -v redis-cli >/dev/null 2>&1 && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }; then \
		if ! command -v redis-server >/dev/null 2>&1; then \
			[ "$$(id -u)" -eq 0 ] || { echo "make $@: Redis is missing: apt-get install redis-server (as root)"; exit 1; }; \
			echo "make $@: installing Debian's redis-server"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		fi; \
		redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || { \
			echo "make $@: starting redis-server on 127.0.0.1:6379"; \
			redis-server --bind 127.0.0.1 --port 6379 --save '' --appendonly no --daemonize yes >/dev/null; \
			for i in 1 2 3 4 5 6 7 8 9 10; do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done; }; \
	fi;

.PHONY: bench
bench: ## Run cmd/feedbench (writes docs/BENCHMARKS.md; phases O and W need Redis on 127.0.0.1:6379 and wrk, installed if missing)
	@$(WITH_BENCH_TOOLS) $(WITH_TEST_DB) \
	set -x; $(GO) run ./cmd/feedbench $(BENCHFLAGS)

# The open-loop mix alone, five minutes a rate, into a file of its own.
SOAK_MIX_BENCH = -phases O -mix-duration 5m -out .data/soak-mix.md

.PHONY: soak-mix
soak-mix: ## Phase O of feedbench alone, 5 minutes a rate: the open-loop mix against feedd and the Redis anchor (writes .data/soak-mix.md)
	@$(WITH_BENCH_TOOLS) $(WITH_TEST_DB) \
	set -x; $(GO) run ./cmd/feedbench $(SOAK_MIX_BENCH) $(BENCHFLAGS)

# The disk-resident sizes: the compressed InnoDB inbox as loaded (about 55
# bytes an entry) is 8 times the 128 MiB each engine gets.
DISK_BENCH = -disk -phases ACD -users 66000 -inbox-rows 300 -reader-users 16500 -rounds 4

.PHONY: bench-disk
bench-disk: ## Disk-resident InnoDB against MyRocks inbox (own server, 128 MiB caches, O_DIRECT; section K of docs/BENCHMARKS.md)
	@$(WITH_ROCKSDB_PLUGIN) \
	set -x; $(GO) run ./cmd/feedbench $(DISK_BENCH) $(BENCHFLAGS)

# The TiDB run: both servers on this machine, one after the other.
TIDB_BENCH = -phases AC -users 5000 -inbox-rows 100 -fanout-authors 10 -fanout-followers 2000 -rounds 4 -reader-users 1000 -duration 5s

.PHONY: bench-tidb
bench-tidb: tidbtest ## Fan-out and feed pages on an in-process TiDB beside the local MariaDB (section T of docs/BENCHMARKS.md)
	@$(WITH_TEST_DB) \
	set -x; bin/tidbtest -- $(GO) run ./cmd/feedbench $(TIDB_BENCH) -tidb-beside "$$FEED_TEST_MYSQL_DSN" $(BENCHFLAGS)

.PHONY: crash
crash: ## Run the full crash/recovery tests (FEED_CRASH_FULL=1, -run TestCrash)
	@$(WITH_ROCKSDB_PLUGIN) \
	$(WITH_TEST_DB) \
	export FEED_CRASH_FULL=1; \
	set -x; $(GO) test -count=1 -timeout 60m -run 'TestCrash' $(TESTFLAGS) ./...

.PHONY: soak
soak: ## Run the soak tests long (FEED_SOAK_ROUNDS, default 200): every table's rows flat under churn and under a hostile client's repeats (and feedd's heap)
	@$(WITH_TEST_DB) \
	export FEED_SOAK_ROUNDS="$${FEED_SOAK_ROUNDS:-200}"; \
	set -x; $(GO) test -count=1 -timeout 120m -run 'TestSoak' -v $(TESTFLAGS) ./service ./cmd/feedd

.PHONY: fmt
fmt: ## Fail if gofmt would change any file (gofmt -l)
	@files="$$(find . \( -path ./.data -o -path ./.git -o -path ./bin -o -path ./vendor \) -prune \
		-o -name '*.go' -type f -print0 | xargs -0 -r $(GOFMT) -l)"; \
	if [ -n "$$files" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; \
		echo "$$files"; \
		exit 1; \
	fi

.PHONY: vet
vet: ## go vet ./... (and the console-tagged browser test, the bench-tagged quick benchmark)
	$(GO) vet ./...
	$(GO) vet -tags console ./httpapi/console/browser/
	$(GO) vet -tags bench ./cmd/feedbench/

.PHONY: staticcheck
staticcheck: ## staticcheck ./..., the version go.mod pins as a tool (checks: staticcheck.conf files)
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags console ./httpapi/console/browser/
	$(GO) tool staticcheck -tags bench ./cmd/feedbench/

.PHONY: lint
lint: fmt vet staticcheck ## fmt + vet + staticcheck

.PHONY: check
check: lint ## The inner loop: lint, then go test ./... on the discovered MySQL/MariaDB only (cached results reused; no MyRocks pass)
	@$(WITH_BENCH_TOOLS) $(WITH_TEST_DB) \
	set -x; $(GO) test -timeout 15m $(TESTFLAGS) ./...

.PHONY: db-stop
db-stop: ## Stop the local MariaDB servers started by .ci/localdb.sh (3307, and 3308 with MyRocks)
	.ci/localdb.sh stop
	FEED_LOCAL_DB_PORT=3308 .ci/localdb.sh stop

.PHONY: clean
clean: ## Remove build output (bin/)
	rm -rf bin/
