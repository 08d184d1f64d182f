# EMQ — make help lists the targets.
SHELL     := /bin/bash
GO        ?= go
BIN       ?= bin/emq
JAEGER    ?= bin/jaeger
# A count, not a duration: go1.26's fuzz coordinator can fail a target with
# "context deadline exceeded" when a -fuzztime duration runs out under CPU
# load (golang/go#75804, fixed in go1.27); a count has no deadline to race.
FUZZTIME  ?= 100000x
STATICCHECK_VERSION ?= v0.8.2
# The OpenAPI linter (make lint-openapi): Redocly's CLI from the npm
# registry, pinned, installed once into a cache directory (node 20+).
REDOCLY_VERSION ?= 2.77.0
REDOCLY_DIR ?= $(HOME)/.cache/emq-tools/redocly-$(REDOCLY_VERSION)
RACE      := $(GO) test -race -count=1 -timeout 25m

.PHONY: help run build check test test-python test-most vet race race-most jaeger-idle memory fuzz fuzz-short bench gobench lint lint-openapi screenshots torture faults mutations ha-demo trace-demo clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## build and start a broker on the default embedded journal (./emq-data)
	$(GO) build -o $(BIN) ./cmd/emq
	./$(BIN) broker

build: ## build bin/emq
	$(GO) build -o $(BIN) ./cmd/emq

# The packages make check leaves out: those that need etcd or a browser.
CHECK_SKIP_PKGS := /store/etcdstore$$|/internal/etcdtest$$|/internal/ui$$

check: ## the edit-test loop, under a minute (51–58 s on 2 cores, warm cache): vet, build, the short tests that need neither etcd nor a browser nor fuzzing
	$(GO) vet ./...
	$(GO) build ./...
	$(GO) test -short -count=1 -skip 'Group|Etcd' $$($(GO) list ./... | grep -Ev '$(CHECK_SKIP_PKGS)')

test: vet ## all tests: go vet, the race detector, the memory tests, a short fuzz pass
	@$(MAKE) --no-print-directory -j2 jaeger-idle test-most
	$(RACE) -run '$(JAEGER_TESTS)' ./cmd/emq ./internal/jaegertest
	@echo "[make] trace tests done at $$(date +%T)"
	@$(MAKE) --no-print-directory test-python

# The Python package (clients/python) against bin/emq, on Debian's
# /usr/bin/python3 with python3-zmq and python3-pytest: skipped, saying
# so, when they are missing, unless EMQ_REQUIRE_PYTHON is set (.ci/run
# sets it), where a test that did not run must not pass. It also checks
# that pip installs the package offline (into a temp dir, nothing fetched).
PYTHON ?= /usr/bin/python3
test-python: build ## the Python package's tests (clients/python) against bin/emq, and its offline pip install
	@if ! $(PYTHON) -c 'import zmq, pytest, setuptools' 2>/dev/null; then \
		if [ -n "$$EMQ_REQUIRE_PYTHON" ]; then echo "EMQ_REQUIRE_PYTHON is set: $(PYTHON) needs python3-zmq, python3-pytest and python3-setuptools" >&2; exit 1; fi; \
		echo "[make] test-python skipped: $(PYTHON) lacks python3-zmq, python3-pytest or python3-setuptools (apt-get install them)"; exit 0; \
	fi; \
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m pip install -q --root-user-action=ignore --no-build-isolation --no-index --no-deps --target "$$tmp" ./clients/python; \
	rm -rf clients/python/build; \
	PYTHONPATH="$$tmp" "$$tmp/bin/emq-worker" --help >/dev/null; \
	cd clients/python && EMQ_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q -p no:cacheprovider
	@echo "[make] python tests done at $$(date +%T)"

# make test runs the trace tests (JAEGER_TESTS: they need bin/jaeger)
# last. On a fresh machine Jaeger takes minutes to build, so it builds
# beside the other tests at the lowest CPU priority, on the cores they
# leave idle (cmd/emq's process-level tests wait on their children about
# half the time).
JAEGER_TESTS := Jaeger

test-most: # one after another, beside jaeger-idle
	@$(MAKE) --no-print-directory race-most
	@$(MAKE) --no-print-directory memory
	@$(MAKE) --no-print-directory fuzz-short

race-most:
	$(RACE) -skip '$(JAEGER_TESTS)' ./...
	@echo "[make] race (but the trace tests) done at $$(date +%T)"

jaeger-idle:
	@nice -n 19 $(MAKE) --no-print-directory $(JAEGER)

vet:
	$(GO) vet ./...
	@echo "[make] vet done at $$(date +%T)"

race: $(JAEGER) ## every package under the race detector: cmd/emq's process-level tests take about 9 minutes on 2 cores
	$(RACE) ./...
	@echo "[make] race done at $$(date +%T)"

memory: ## the broker's memory tests, which the race detector skips
	$(GO) test -count=1 -run 'LargerThanMemory|StayWithinTheBudget|LargeJobsAtOnce' ./broker/
	@echo "[make] memory done at $$(date +%T)"

fuzz-short: ## every fuzz target for FUZZTIME (default 100,000 inputs each)
	@FUZZTIME=$(FUZZTIME) GO=$(GO) ./scripts/fuzz.sh

fuzz: ## every fuzz target for 2 minutes (FUZZTIME=... to change)
	@FUZZTIME=$(if $(filter command line,$(origin FUZZTIME)),$(FUZZTIME),2m) GO=$(GO) ./scripts/fuzz.sh

bench: build ## EMQ beside the peers of ../shared/anchors, then alone: docs/benchmarks.md (~11 min, root)
	BIN=$(BIN) ./scripts/bench.sh

gobench: ## the go test benchmarks of every package
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint: lint-openapi ## staticcheck (installed with go install on first use), gofmt, and the OpenAPI linter
	@command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@PATH="$$PATH:$$($(GO) env GOPATH)/bin" staticcheck ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@echo "lint: staticcheck and gofmt clean"

# admin/openapi.json is the document GET /api/v1/openapi.json serves (embedded
# as it is); admin/redocly.yaml and admin/.redocly.lint-ignore.yaml say
# what the linter checks and lets pass.
lint-openapi: ## lint the admin API's OpenAPI document with Redocly's CLI (installed from npm on first use)
	@test -x $(REDOCLY_DIR)/node_modules/.bin/redocly || npm install --no-audit --no-fund --prefix $(REDOCLY_DIR) @redocly/cli@$(REDOCLY_VERSION) >/dev/null
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY_DIR)/node_modules/.bin/redocly lint admin/openapi.json --config admin/redocly.yaml

screenshots: ## the dashboard's pictures in docs/ui (needs chromium)
	EMQ_REQUIRE_BROWSER=1 EMQ_UI_SCREENSHOTS=$(CURDIR)/docs/ui go test ./internal/ui -count=1 -run 'TestPages|TestChartMoves|TestLogin|TestWorkflowPages'

torture: ## the reliability suite at full length (100 broker kills, 200 power cuts, 50 damaged journals, 100 group leader kills, floods, disk full, 4 GiB backlog)
	set -o pipefail; EMQ_TORTURE=1 $(GO) test -v -count=1 -timeout 60m -run 'Crash|Reliab|DiskFull|PowerCut|FailedFlush|Damage|Hostile|LargerThanMemory|StayWithinTheBudget|LargeJobsAtOnce' ./broker/ ./store/... 2>&1 \
		| grep -E '^(--- |ok|FAIL|SUMMARY|panic)|_test.go:[0-9]+: '
	set -o pipefail; EMQ_GROUP_ROUNDS=100 $(GO) test -v -count=1 -timeout 60m -run 'TestGroupLeaderKilledUnderLoad' ./cmd/emq/ 2>&1 \
		| grep -E '^(--- |ok|FAIL|panic)|_test.go:[0-9]+: '

faults: ## a group's faults for 20 rounds each while jobs flow, in network namespaces (root, nftables): partitions, pauses, a stepped clock, SIGKILL, SIGTERM: the table (~45 min)
	set -o pipefail; EMQ_REQUIRE_NETNS=1 EMQ_FAULT_ROUNDS=20 $(GO) test -v -count=1 -timeout 90m -run 'TestGroupFaults' ./cmd/emq/ 2>&1 \
		| grep -E '^\s*(--- |ok|FAIL|panic|\|)|_test.go:[0-9]+: '

mutations: ## each durability line removed in a scratch copy of the tree (fdatasync, checksums, the torn tail, quarantine, bbolt's flush): the test guarding it must fail; prints the table (~2 min, root)
	GO=$(GO) ./scripts/mutations.sh

# Jaeger (the tracing backend the trace tests read back from), built from
# its Go module as pinned in internal/jaegertest/tool/go.mod; its own
# module, so its dependencies stay out of ours. Built without the
# compiler's optimisations and without debug information: it only has to
# answer the tests, and on a fresh machine of 2 cores it builds in 308 s
# instead of 564. It is written under another name and moved, so a build
# cut short leaves no binary.
jaeger: $(JAEGER) ## build bin/jaeger, the tracing backend of the trace tests and make trace-demo

$(JAEGER): internal/jaegertest/tool/go.mod internal/jaegertest/tool/go.sum
	cd internal/jaegertest/tool && $(GO) build -gcflags='all=-N -l' -ldflags='-s -w' -o $(CURDIR)/$(JAEGER).part github.com/jaegertracing/jaeger/cmd/jaeger
	mv $(JAEGER).part $(JAEGER)

trace-demo: build $(JAEGER) ## Jaeger, a broker and a worker exporting spans; emq send sends jobs (one retried) and prints each trace from Jaeger
	BIN=$(BIN) JAEGER=$(JAEGER) ./scripts/trace-demo.sh

ha-demo: build ## three etcd members, two brokers, a worker and a sender on this machine; SIGKILL the leader, print the failover and lost=0
	BIN=$(BIN) ./scripts/ha-demo.sh

clean:
	rm -rf bin
