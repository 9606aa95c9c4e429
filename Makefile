# inboxbench: the two commands a new user needs are `make bench` and `make test`.
# Both install and start what they need (Debian packages, Maven artifacts)
# through `bench stack up`; nothing has to be installed by hand.

GO      ?= go
BENCH   := bin/bench
# Race detection everywhere except where rocketmq-client-go's push
# consumer runs: it has data races of its own (see brokers/README.md).
# Every such test has LibConsumer in its name; every other RocketMQ test
# (the driver's own consumer, its publisher) runs under -race.
RACE_PKGS = $(shell $(GO) list ./...)
LIB_CONSUMER_TESTS = LibConsumer
# Tests that disturb a shared server for everyone run alone, after the
# parallel packages: a node-wide RabbitMQ memory alarm; PostgreSQL driven
# flat out by pgbench and the pgx loop, with schemas created and dropped
# under the WAL decoding of other packages' cells; the whole stack stopped
# and started STACK_CYCLES times back to back (it is left running); a real
# series of runs whose throughput step publish must find (beside other
# packages' load the step drowned in noise: seen twice); the example
# services built with their own tools (Maven) and judged from outside,
# whose JVMs and timed faults need the cores to themselves.
SOLO_TESTS = ByAlarm|TwinsRunAsTheStrategies|CalibrationRuns|StackRestartsBackToBack|PublishMarksARealStep|UnderTest|AsAService
# Tests named Replicated need the replicated stack (three Kafka nodes, a
# PostgreSQL primary and its synchronous standby) and kill its nodes: they
# run in test-replicated, which starts that stack and stops it after.
REPLICATED_TESTS = Replicated
REPLICATED_PKGS = ./compose/... ./failover ./conform
STACK_CYCLES ?= 3
TEST_TIMEOUT ?= 30m
# Tests of what the secure stack's servers refuse (TestSecure…) run in the
# secure stage only, against `bench stack up --secure`.
SECURE_TESTS = TestSecure
# The secret search (every process's command line sampled while bench
# run, conform, calibrate, calibrate-db, report and publish run against the
# secure stack, then every file they wrote) and the vendor tools' server
# verification run after the other secure tests, alone: the search would
# see their processes, and the JVM tools time out on a host they saturate.
SECRETS_TESTS = TestSecureNoSecretAnywhere|TestSecureVendorToolsVerifyTheServer

.PHONY: all build bench test test-deps test-secure test-replicated test-replicated-brokers fmt-check vet fuzz stack-up stack-down stack-status clean

all: build

build:
	$(GO) build -o $(BENCH) ./cmd/bench

stack-up: build
	$(BENCH) stack up

stack-down: build
	$(BENCH) stack down

stack-status: build
	$(BENCH) stack status

RUN_ID ?= $(shell date -u +%Y%m%d-%H%M%S)

# The main job: stack up, the default workload through the database-only
# baseline and all three real brokers with the recommended strategy, then
# the report.
# The report is written even when a check fails; the run's exit status wins.
# It starts only the services those cells use: the other transports
# (bench stack up starts them all) cost install time and memory a first
# make bench does not need; `bench run --brokers all` runs every driver.
BENCH_BROKERS ?= none,rabbitmq,kafka,rocketmq
BENCH_SERVICES ?= postgres rabbitmq kafka rocketmq
bench: build
	$(BENCH) stack up $(BENCH_SERVICES)
	@status=0; \
	$(BENCH) run --brokers $(BENCH_BROKERS) --workload default --run-id $(RUN_ID) || status=$$?; \
	if [ -f results/$(RUN_ID)/result.json ]; then $(BENCH) report results/$(RUN_ID) || status=$$?; fi; \
	exit $$status

# Headless Chromium renders the HTML report in the report tests.
test-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (for the HTML report test)"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null; \
	  else echo "missing chromium: run 'sudo apt-get install -y chromium'"; exit 2; fi; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go.mod as `go mod tidy` leaves it: direct dependencies not marked indirect.
vet:
	$(GO) vet ./...
	$(GO) mod tidy -diff

# Unit and integration tests against the real services started by stack-up.
test: fmt-check vet test-deps stack-up
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -skip '$(LIB_CONSUMER_TESTS)|$(SOLO_TESTS)|$(SECURE_TESTS)|$(REPLICATED_TESTS)' $(RACE_PKGS)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(LIB_CONSUMER_TESTS)' $(RACE_PKGS)
	INBOXBENCH_TEST_STACK_CYCLES=$(STACK_CYCLES) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -p 1 -run '$(SOLO_TESTS)' $(RACE_PKGS)
	@$(MAKE) --no-print-directory test-secure
	@$(MAKE) --no-print-directory test-replicated
	@$(MAKE) --no-print-directory test-replicated-brokers
	@$(MAKE) --no-print-directory fuzz

# The secure stage (docs/testing.md): the secure stack beside the plain
# one (TLS and authentication on every service, its own ports and
# directory), the drivers' conformance suites and the refusals over TLS
# with authentication, pgbench over TLS (calibrate-db's twins), the
# PostgreSQL inbox over TLS with verify-full
# (INBOXBENCH_SECURE points the tests at it through compose.ApplyVariant;
# without -race, which the main stage runs them under: 32 goroutines of
# its stress test under the race detector and TLS starve a shared 2-core
# host into lock timeouts), a smoke run and a short conform; the secure
# stack is stopped whatever failed. About 8 minutes on the 2-core target.
SECURE_OUT ?= results
test-secure: build
	@status=0; \
	$(BENCH) stack up --secure || status=1; \
	if [ $$status = 0 ]; then \
	  INBOXBENCH_SECURE=true $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run 'TestConformance$$|TestLargestWorkloadMessage|TestDurability$$|TestTwinsRunAsTheStrategies|$(SECURE_TESTS)' \
	    -skip '$(SECRETS_TESTS)' ./brokers/rabbitmq ./brokers/kafka ./brokers/rocketmq ./compose/... ./cmd/bench ./dbcalib || status=1; \
	  INBOXBENCH_SECURE=true $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./inbox || status=1; \
	  $(BENCH) run --secure --brokers none,rabbitmq,kafka,rocketmq --workload smoke --out $(SECURE_OUT) || status=1; \
	  $(BENCH) conform --secure --brokers rabbitmq,kafka,rocketmq --scenarios duplicate,consumer-crash --strategies tx --out $(SECURE_OUT) || status=1; \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -p 1 -run '$(SECRETS_TESTS)' ./calibrate ./cmd/bench || status=1; \
	fi; \
	$(BENCH) stack down --secure || status=1; \
	exit $$status

# One short failover per family on the replicated stack (docs/testing.md):
# it is started here and stopped after, pass or fail, so the two cores are
# back to the other stages; a node that does not answer fails the tests by
# name. About 5 minutes on the 2-core target.
test-replicated: build
	@status=0; \
	$(BENCH) stack up --topology replicated kafka postgres || status=$$?; \
	if [ $$status = 0 ]; then \
	  $(GO) test -count=1 -timeout 20m -p 1 -run '$(REPLICATED_TESTS)' $(REPLICATED_PKGS) || status=$$?; \
	fi; \
	$(BENCH) stack down --topology replicated || status=$$?; \
	exit $$status

# The RabbitMQ and RocketMQ families of the replicated stack, one at a time
# (two cores; docs/testing.md): each is started, its drivers' leader-kill
# failover test and replicated durability report run against it, and it is
# stopped again, pass or fail. A family that does not start, or a node that
# does not answer, fails by name (the tests never skip).
REPLICATED_FAMILIES = rabbitmq rocketmq
REPLICATED_FAMILY_TESTS = ^TestReplicated(FailoverLeaderKill|FailoverMasterKill|Durability)$$
test-replicated-brokers: build
	@status=0; for f in $(REPLICATED_FAMILIES); do \
	  start=$$(date +%s); \
	  if $(BENCH) stack up --topology replicated $$f; then \
	    $(GO) test -count=1 -timeout 8m -run '$(REPLICATED_FAMILY_TESTS)' ./brokers/$$f || status=1; \
	  else status=1; fi; \
	  $(BENCH) stack down --topology replicated $$f || status=1; \
	  echo "replicated $$f: $$(( $$(date +%s) - start )) s"; \
	done; exit $$status

# The parsers of untrusted input, fuzzed briefly on every `make test` from
# their committed seed corpora (PKG/testdata/fuzz/NAME); a crasher is
# written there. Run longer with e.g. `make fuzz FUZZ_TIME=2000000x`. The
# budget is a count of inputs, not a duration: with a duration, Go 1.26's
# fuzz coordinator can fail a clean run with "context deadline exceeded"
# as the time runs out (go.dev/issue/75804, fixed in Go 1.27).
FUZZ_TIME ?= 100000x
FUZZERS = envelope:FuzzUnmarshal workload:FuzzParse inbox/strategyfile:FuzzParse
fuzz:
	@for f in $(FUZZERS); do \
	  pkg=$${f%%:*}; name=$${f#*:}; \
	  echo "fuzz $$name in ./$$pkg, $(FUZZ_TIME) inputs"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_TIME) ./$$pkg || exit 1; \
	done

clean:
	rm -rf bin
