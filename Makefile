# ferry: build, test, demo. Everything a target needs is built into ./bin or
# ./tools (both git-ignored), so a fresh checkout needs only Go and make.

GO          ?= go
BIN         := $(CURDIR)/bin
TOOLS       := $(CURDIR)/tools/bin
VERSITYGW   := $(TOOLS)/versitygw
VERSITYGW_VERSION := v1.8.0
STATICCHECK := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOTEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: all build tools test unit demo lint fmt clean

all: build

## build: bin/ferry
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/ferry ./cmd/ferry
	$(GO) build -o $(BIN)/ferry-trainsim ./cmd/ferry-trainsim

## tools: the real S3 server the tests and the demo run against (built once)
tools: $(VERSITYGW)

$(VERSITYGW):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

## test: unit and integration tests (integration tests start versitygw on 127.0.0.1)
test: tools
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) ./...

## unit: only the tests that need no S3 server
unit:
	$(GO) test $(GOTEST_FLAGS) -short ./...

## demo: local S3 server, a simulated 2-rank training job, push/agent, restore, verify
demo: build tools
	@VERSITYGW=$(VERSITYGW) FERRY=$(BIN)/ferry TRAINSIM=$(BIN)/ferry-trainsim ./scripts/demo.sh

## lint: gofmt, go vet, staticcheck
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
