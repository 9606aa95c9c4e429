# inboxbench: the two commands a new user needs are `make bench` and `make test`.
# Both install and start what they need (Debian packages, Maven artifacts)
# through `bench stack up`; nothing has to be installed by hand.

GO      ?= go
BENCH   := bin/bench
# Race detection everywhere except the RocketMQ driver, whose client library
# has data races of its own (see brokers/rocketmq/README.md).
RACE_PKGS = $(shell $(GO) list ./... | grep -v /brokers/rocketmq)
NORACE_PKGS = $(shell $(GO) list ./... | grep /brokers/rocketmq)
TEST_TIMEOUT ?= 30m

.PHONY: all build bench test test-unit fmt-check vet stack-up stack-down stack-status clean

all: build

build:
	$(GO) build -o $(BENCH) ./cmd/bench

stack-up: build
	$(BENCH) stack up

stack-down: build
	$(BENCH) stack down

stack-status: build
	$(BENCH) stack status

# The main job: stack up, the default benchmark, a report.
bench: stack-up
	$(BENCH) stack status

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Unit and integration tests against the real services started by stack-up.
test: fmt-check vet stack-up
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	@if [ -n "$(NORACE_PKGS)" ]; then $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(NORACE_PKGS); fi

clean:
	rm -rf bin
