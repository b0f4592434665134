# ferry: build, test, demo. Everything a target needs is built into ./bin or
# ./tools (both git-ignored), so a fresh checkout needs only Go and make.

GO          ?= go
# The Go release of go.mod's go line, selected explicitly: machines that set
# GOTOOLCHAIN=local would otherwise refuse it (or build with whatever is
# installed), and the go command fetches it through the module proxy when
# it is not installed. make GOTOOLCHAIN=local uses the installed go.
GO_VERSION  := $(shell sed -n 's/^go //p' go.mod)
export GOTOOLCHAIN := go$(GO_VERSION)
BIN         := $(CURDIR)/bin
TOOLS       := $(CURDIR)/tools/bin
VERSITYGW   := $(TOOLS)/versitygw
VERSITYGW_VERSION := v1.8.0
STATICCHECK := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# Every ferry binary (build, release, image, bench) is built the same way:
# static (CGO off, so one binary runs on any Linux node, chroot or empty
# image), -trimpath, version and commit stamped (Go's own VCS stamp is off
# wherever GOFLAGS=-buildvcs=false).
# The benchmarks keep the symbol table (perf reads it: BENCH_FLAGS=-perf).
FERRY_STAMP       = -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FERRY_BUILD       = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(FERRY_STAMP)"
FERRY_BENCH_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(FERRY_STAMP)"
GOTEST_FLAGS ?= -count=1 -timeout 20m

.PHONY: all build tools test test-r2 test-writers unit demo e2e lint fmt clean

all: build

## build: bin/ferry, the same static binary as make release's for this platform
build:
	$(FERRY_BUILD) -o $(BIN)/ferry ./cmd/ferry
	$(GO) build -o $(BIN)/ferry-trainsim ./cmd/ferry-trainsim

## tools: the real S3 server the tests and the demo run against (built once)
tools: $(VERSITYGW)

$(VERSITYGW):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

## test: unit and integration tests (integration tests start versitygw on 127.0.0.1)
test: tools
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) ./...

## test-r2: the integration suites again, through a proxy that refuses what
## Cloudflare R2 refuses (internal/s3proxy), so R2 compatibility is tested
## without R2. The test binary fails if the proxy refused any request.
## The trace replay is left to make test and make test-traces: it checks the agent's
## completion rules, and sends what the save-schedule fuzzer sends.
R2_SUITES := ./cmd/ferry/ ./internal/s3store/ ./internal/s3test/ ./uploader/ ./restore/ ./agent/ ./internal/verify/ ./internal/copier/ ./internal/peer/
test-r2: tools
	FERRY_S3TEST_R2RULES=1 FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -skip '^TestSaveTraceReplay$$' $(R2_SUITES)

## test-writers: the writer-pattern suite in full (cmd/ferry
## TestWriterPatterns): every trainer save order of every layout against
## `ferry agent` at its defaults, each restored and compared byte for byte
## with the trainer's final files; then 200 schedules of the save-schedule
## fuzzer (agent TestSaveScheduleFuzz). `make test` runs the fast rows and
## 10 schedules.
FUZZ_SEEDS ?= 200
test-writers: tools
	FERRY_WRITER_SUITE=full FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -run '^TestWriterPatterns$$' ./cmd/ferry/
	FERRY_FUZZ_SEEDS=$(FUZZ_SEEDS) FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -run '^TestSaveScheduleFuzz$$' ./agent/

## fuzz-agent: the save-schedule fuzzer alone, SEEDS schedules from seed
## FIRST (default 1), PARALLEL at once: seeded trainer behaviour (ranks,
## markers, kills mid-save, re-saves, cleanup, quick deletion, temporary
## folders, rewrites in place) against the agent at its defaults on
## versitygw, checked against every state the trainer completed. Seeds
## rotate over every layout (dcp, hf, deepspeed, megatron, single,
## composer, flat, flat-counter); FERRY_FUZZ_LAYOUT=composer,flat in the
## environment runs only those
SEEDS    ?= 1000
FIRST    ?= 1
PARALLEL ?= 6
.PHONY: fuzz-agent
fuzz-agent: tools
	FERRY_FUZZ_SEEDS=$(SEEDS) FERRY_FUZZ_FIRST=$(FIRST) FERRY_FUZZ_PARALLEL=$(PARALLEL) FERRY_VERSITYGW=$(VERSITYGW) \
		$(GO) test -count=1 -timeout 6h -run '^TestSaveScheduleFuzz$$' ./agent/

## test-traces: the trace replay's fixed CI sample (agent
## TestSaveTraceReplay): 300 schedules drawn with seed 1 from every trace's
## kill points, gaps and restarts, 32 at once, alone (make test runs 40, 8
## at once, beside the other packages). About 5 minutes on 2 cores.
.PHONY: test-traces
test-traces: tools
	FERRY_TRACE_SAMPLE=300 FERRY_TRACE_PARALLEL=32 FERRY_VERSITYGW=$(VERSITYGW) $(GO) test -count=1 -timeout 30m -run '^TestSaveTraceReplay$$' ./agent/

## fuzz-traces: the trace replay in full (agent TestSaveTraceReplay): every
## save-order trace (testdata/saveorders/*.trace, FORMAT.md there; and the
## replay's samples) killed after each of its operations, at each gap of
## GAPS, the job restarted to save the same step again and the next one,
## against the agent on versitygw, checked by the fuzzer's oracle; prints
## the count of traces, kill points and schedules. NODES: the ranks also
## spread over 2 and 4 nodes (a watch dir and an agent each, the same
## settings, one bucket); CLOCK=-1h,1h adds clock steps; FERRY_TRACE=name,...
## in the environment runs only those traces. `go test` runs a fixed sample
## of 40 on one node, make test-traces 300 (FERRY_TRACE_SAMPLE)
GAPS  ?= 0,2s
NODES ?= 1,2,4
CLOCK ?=
TRACE_PARALLEL ?= 32
.PHONY: fuzz-traces
fuzz-traces: tools
	@report=$$(mktemp); FERRY_TRACE_MODE=all FERRY_TRACE_GAPS=$(GAPS) FERRY_TRACE_NODES=$(NODES) FERRY_TRACE_CLOCK=$(CLOCK) FERRY_TRACE_PARALLEL=$(TRACE_PARALLEL) \
		FERRY_TRACE_REPORT=$$report FERRY_VERSITYGW=$(VERSITYGW) \
		$(GO) test -count=1 -timeout 6h -run '^TestSaveTraceReplay$$' ./agent/; rc=$$?; cat $$report; rm -f $$report; exit $$rc

## seaweedfs: SeaweedFS's `weed`, the second real S3 server of make
## test-compat (built once; about 10 minutes and 233 MB). `go install`
## refuses its module (replace directives): built in the module cache.
WEED            := $(TOOLS)/weed
SEAWEEDFS_VERSION := v0.0.0-20261109003541-7506e5f91cd6
.PHONY: seaweedfs test-compat test-endpoint
seaweedfs: $(WEED)

$(WEED):
	@mkdir -p $(TOOLS)
	dir=$$(cd / && $(GO) mod download -json github.com/seaweedfs/seaweedfs@$(SEAWEEDFS_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	cd "$$dir" && GOFLAGS=-mod=mod $(GO) build -o $(WEED).tmp ./weed && mv $(WEED).tmp $(WEED)

## test-compat: the store suite (HTTP and HTTPS), the conditional-write
## check, the push and restore round trip, the agent, the multi-node commit,
## doctor, and the uploader, restore, copier and peer suites against
## SeaweedFS instead of versitygw (docs/compatibility.md); about 10 minutes
COMPAT_S3STORE := ^(TestStore|TestBadCredentials|TestMissingBucket|TestCABundle)$$
COMPAT_CLI     := ^(TestCLIRoundTrip|TestCLIWithCABundle|TestCLIRePush|TestCLIServerErrors|TestConditionalWrites.*|TestAgentSurvivesSIGKILL|TestAgentSIGTERMDrains|TestCLIMultiNode.*|TestAgentThreeNodes|TestAgentDedupAndKeepRemote|TestDoctor.*)$$
test-compat: $(WEED)
	FERRY_S3TEST_SERVER=seaweedfs FERRY_SEAWEEDFS=$(WEED) $(GO) test $(GOTEST_FLAGS) -run '$(COMPAT_S3STORE)' ./internal/s3store/
	FERRY_S3TEST_SERVER=seaweedfs FERRY_SEAWEEDFS=$(WEED) $(GO) test $(GOTEST_FLAGS) -run '$(COMPAT_CLI)' ./cmd/ferry/
	FERRY_S3TEST_SERVER=seaweedfs FERRY_SEAWEEDFS=$(WEED) $(GO) test $(GOTEST_FLAGS) ./uploader/ ./restore/ ./internal/copier/ ./internal/peer/

## test-endpoint: the store suite, the conditional-write check and a round
## trip against a real endpoint: FERRY_TEST_S3_ENDPOINT, FERRY_TEST_S3_BUCKET
## (FERRY_TEST_S3_REGION), credentials from the environment as for ferry.
## Objects go under a fresh prefix ferry-compat/... and are deleted.
test-endpoint:
	@[ -n "$$FERRY_TEST_S3_ENDPOINT" ] && [ -n "$$FERRY_TEST_S3_BUCKET" ] || { echo "make test-endpoint needs FERRY_TEST_S3_ENDPOINT and FERRY_TEST_S3_BUCKET (and credentials)"; exit 1; }
	$(GO) test $(GOTEST_FLAGS) -v -run '^TestEndpoint' ./internal/s3store/ ./cmd/ferry/

## test-alerts: deploy/monitoring's Prometheus rules checked (promtool
## check rules) and each alert run against its recorded series (promtool
## test rules ferry-alerts.test.yml); installs Debian's prometheus package
## for promtool when it is missing (as root). The Go side (every series a
## rule or dashboard panel uses is served by a real agent) is cmd/ferry
## TestMonitoringSeriesExist, in make test.
PROMTOOL ?= promtool
.PHONY: test-alerts
test-alerts:
	@command -v $(PROMTOOL) >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus; \
		else echo "make test-alerts needs promtool: sudo apt-get install -y prometheus"; exit 1; fi; }
	cd deploy/monitoring && $(PROMTOOL) check rules ferry-alerts.yml && $(PROMTOOL) test rules ferry-alerts.test.yml

## unit: only the tests that need no S3 server
unit:
	$(GO) test $(GOTEST_FLAGS) -short ./...

## fuzz: a short bounded run of the manifest decoder's, the pickle
## reader's (DCP's .metadata) and DeepSpeed's record reader's fuzz targets
## (FUZZTIME=10m for longer); new failing inputs land in
## <package>/testdata/fuzz/<target> and are replayed by `go test` from then on
FUZZTIME ?= 30s
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./manifest
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./internal/pickle
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime $(FUZZTIME) ./internal/dsrecord

## demo: local S3 server, a simulated 2-rank training job, push/agent, restore, verify
demo: build tools
	@VERSITYGW=$(VERSITYGW) FERRY=$(BIN)/ferry TRAINSIM=$(BIN)/ferry-trainsim ./scripts/demo.sh

## e2e: a real PyTorch job (Debian's python3-torch) killed mid-save, restored
## on an empty directory and resumed bit-exact (examples/resume); then the
## torch 2.6 scenarios in the trixie root (e2e-dcp)
E2E_PYTHON  ?= /usr/bin/python3
e2e: build tools trixie
	@$(E2E_PYTHON) -c 'import torch' 2>/dev/null || { echo "make e2e needs Debian's python3-torch: apt-get install -y python3-torch"; exit 1; }
	VERSITYGW=$(VERSITYGW) FERRY=$(BIN)/ferry PYTHON=$(E2E_PYTHON) timeout 300 ./examples/resume/scenario.sh
	$(MAKE) e2e-dcp

## trixie: the Debian 13 root (tools/trixie) with torch 2.6, numpy,
## safetensors, OpenBLAS and PyTorch Ignite in which the torch 2.6
## scenarios run; built once, as root (debootstrap; about 2-3 minutes and
## 1.3 GB); a root that lacks a package of the list gets it installed
TRIXIE := $(CURDIR)/tools/trixie
.PHONY: trixie e2e-dcp dcp-measure
trixie:
	./scripts/trixie-root.sh $(TRIXIE)

## e2e-dcp: torch 2.6 DCP (DTensor + AdamW on 4 ranks, dcp.save and
## async_save) killed 22 times mid-save with `ferry agent` beside it, every
## committed step loaded at 1, 2 and 8 ranks, resumed bit-exact; HF-style
## and torch.save trainers (examples/dcp; as root: chroot)
e2e-dcp: tools trixie
	$(FERRY_BUILD) -o $(BIN)/static/ferry ./cmd/ferry
	FERRY=$(BIN)/static/ferry VERSITYGW=$(VERSITYGW) ROOT=$(TRIXIE) timeout 1200 ./examples/dcp/scenario.sh

## record-saves: record torch 2.6 dcp.save and async_save (2 ranks),
## torch.save and Ignite's DiskSaver under strace in the trixie root, as
## testdata/saveorders/recorded/*.ops (record.sh there; as root); the
## savetrace TestRecordings compares each with its hand-written trace
.PHONY: record-saves
record-saves: trixie
	ROOT=$(TRIXIE) ./testdata/saveorders/recorded/record.sh

## dcp-measure: an inotify trace of torch 2.6 dcp.save and async_save of a
## 4-rank ~200 MiB step, and ferry's time to durable after each (results in
## bench-results/dcp/; examples/dcp/measure.sh)
dcp-measure: tools trixie
	$(FERRY_BUILD) -o $(BIN)/static/ferry ./cmd/ferry
	FERRY=$(BIN)/static/ferry VERSITYGW=$(VERSITYGW) ROOT=$(TRIXIE) ./examples/dcp/measure.sh


## docs: docs/reference.md and cmd/ferry's golden --help files, generated
## from --help (TestDocsReference and TestHelpGolden fail, in make test,
## when they are stale)
.PHONY: docs
docs:
	$(GO) test -count=1 -run '^TestDocsReference$$' ./cmd/ferry/ -update-docs
	$(GO) test -count=1 -run '^TestHelpGolden$$' ./cmd/ferry/ -update

## lint: gofmt, go vet, staticcheck, code size (internal/codesize: no
## non-test function over 80 lines, no file over 15,000 characters),
## govulncheck (vulncheck)
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./internal/codesize $$(git ls-files '*.go')
	$(STATICCHECK) ./...
	@$(MAKE) --no-print-directory vulncheck

## vulncheck: govulncheck against the Go vulnerability database, built from
## the golang.org/x/vulndb module on the Go module proxy (VULNDB_VERSION,
## default the newest; pin one to work offline) into tools/vulndb/<version>
## with its indexdb; fails on a vulnerability ferry's code reaches,
## standard library included (the toolchain's version is the one checked)
GOVULNCHECK         := $(TOOLS)/govulncheck
GOVULNCHECK_VERSION := v1.10.0
VULNDB_VERSION      ?= latest
.PHONY: vulncheck
vulncheck: $(GOVULNCHECK)
	@v=$$(cd / && $(GO) list -m -f '{{.Version}}' golang.org/x/vulndb@$(VULNDB_VERSION)) && db=$(CURDIR)/tools/vulndb/$$v && \
	if [ ! -s $$db/index/db.json ]; then \
		dir=$$(cd / && $(GO) mod download -json golang.org/x/vulndb@$$v | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
		GOBIN=$(TOOLS) $(GO) install golang.org/x/vulndb/cmd/indexdb@$$v && \
		rm -rf $$db.tmp && mkdir -p $$(dirname $$db) && $(TOOLS)/indexdb -vulns $$dir/data/osv -out $$db.tmp && mv $$db.tmp $$db; \
	fi && echo "govulncheck $(GOVULNCHECK_VERSION) ($$($(GO) env GOVERSION)), database golang.org/x/vulndb@$$v" && \
	$(GOVULNCHECK) -db file://$$db ./...

$(GOVULNCHECK):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(STATICCHECK):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

## bench: ferry vs aws-cli and s5cmd on a local versitygw, about 15 min
## (cmd/ferry-bench/README.md); BENCH_QUICK=1 for a 4 x 64 MiB smoke run, BENCH_FLAGS
## for more (e.g. BENCH_FLAGS="-perf -rounds 5"). Results in bench-results/.
S5CMD         := $(TOOLS)/s5cmd
S5CMD_VERSION := v2.3.0
BENCH_DEBS    := awscli b3sum time
BENCH_FLAGS   ?=

# make scale: the multi-node commit, big manifests and a long history in one
# process against the in-memory store with 30 ms per request (internal/bench/scale);
# SCALE_FLAGS=-nodes=8,64 for a quick run. Writes bench-results/scale.json.
.PHONY: scale
scale:
	@mkdir -p bench-results
	$(GO) run ./cmd/ferry-scale -out bench-results/scale.json $(SCALE_FLAGS)

.PHONY: bench bench-go bench-deps
## bench-wan: the upload, restore and time-to-durable comparison again with
## every tool reaching the server through toxiproxy (latency each way, a
## bandwidth cap per connection), at each of WAN_LINKS; results in
## bench-results/wan-<rtt>/. BENCH_FLAGS as for bench.
TOXIPROXY         := $(TOOLS)/toxiproxy/server
TOXIPROXY_VERSION := v2.5.0
WAN_LINKS         ?= 0ms,100MB 30ms,100MB 80ms,50MB 150ms,25MB
WAN_FLAGS         ?= -files 8 -size 128MiB -small 1000x256KiB -rounds 2 -phases upload,restore,durable
bench-wan: tools $(S5CMD) $(TOXIPROXY) bench-deps
	$(FERRY_BENCH_BUILD) -o $(BIN)/bench/ferry ./cmd/ferry
	$(GO) build -o $(BIN)/bench/ferry-trainsim ./cmd/ferry-trainsim
	$(GO) build -o $(BIN)/ferry-bench ./cmd/ferry-bench
	for link in $(WAN_LINKS); do \
		$(BIN)/ferry-bench -ferry $(BIN)/bench/ferry -trainsim $(BIN)/bench/ferry-trainsim -versitygw $(VERSITYGW) -s5cmd $(S5CMD) \
			-toxiproxy $(TOXIPROXY) -wan $$link -out bench-results/wan-$${link%%,*} $(WAN_FLAGS) $(BENCH_FLAGS) || exit 1; \
	done

$(TOXIPROXY):
	@mkdir -p $(dir $(TOXIPROXY))
	GOBIN=$(dir $(TOXIPROXY)) $(GO) install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)

.PHONY: test-wan
## test-wan: push and restore through toxiproxy while the link degrades
## mid-transfer (cmd/ferry TestCLIDegradingLink): they slow down and
## finish, with no error and every byte verified. Builds toxiproxy.
test-wan: tools $(TOXIPROXY)
	FERRY_TOXIPROXY=$(TOXIPROXY) FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -run '^TestCLIDegradingLink$$' ./cmd/ferry/

.PHONY: test-faults
## test-faults: faults across the link (issue 40): the agent behind
## toxiproxy through connections reset mid-body, a black hole on the parts
## and on the manifest PUT, 100 kB/s for a minute, latency spikes, a key
## rotated in its credentials file or credential_process, and its
## endpoint's name failing to resolve for a minute; then a clock 20 minutes
## off and the minute of DNS failure at the store (internal/s3store). Each
## ends with every step committed and restoring byte for byte, the agent
## never restarted. About 5 minutes. Builds toxiproxy.
test-faults: tools $(TOXIPROXY)
	FERRY_TOXIPROXY=$(TOXIPROXY) FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -run '^TestFault' ./cmd/ferry/
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test $(GOTEST_FLAGS) -run '^(TestClockSkewCorrected|TestDNSOutage)$$' ./internal/s3store/

bench: tools $(S5CMD) bench-deps
	$(FERRY_BENCH_BUILD) -o $(BIN)/bench/ferry ./cmd/ferry
	$(GO) build -o $(BIN)/bench/ferry-trainsim ./cmd/ferry-trainsim
	$(GO) build -o $(BIN)/ferry-bench ./cmd/ferry-bench
	$(BIN)/ferry-bench -ferry $(BIN)/bench/ferry -trainsim $(BIN)/bench/ferry-trainsim -versitygw $(VERSITYGW) -s5cmd $(S5CMD) \
		$(if $(BENCH_QUICK),-quick) $(BENCH_FLAGS)

# s5cmd refuses `go install` of its module, so build it in the module cache
# (-mod=mod: module zips leave out its vendor directory).
$(S5CMD):
	@mkdir -p $(TOOLS)
	dir=$$(cd / && $(GO) mod download -json github.com/peak/s5cmd/v2@$(S5CMD_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	cd "$$dir" && $(GO) build -mod=mod -o $(S5CMD) \
		-ldflags "-X github.com/peak/s5cmd/v2/version.Version=$(S5CMD_VERSION) -X github.com/peak/s5cmd/v2/version.GitCommit=module" .

# Debian's awscli, b3sum and time (GNU time measures peak RSS): installed
# when run as root with apt-get, else the command to run is printed.
bench-deps:
	@missing=""; for p in $(BENCH_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
		else echo "make bench needs Debian packages:$$missing; run: sudo apt-get install -y$$missing"; exit 1; fi; \
	fi

## bench-go: Go benchmarks of the hot paths with CPU profiles in bench-results/
bench-go: tools
	@mkdir -p bench-results
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench 'HashPass|BLAKE3Block' -benchtime 2s ./uploader
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/blake3tree
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench 'Push$$' -benchtime 10x -cpuprofile bench-results/push.cpu.prof -o bench-results/uploader.test ./uploader
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench 'Restore$$' -benchtime 10x -cpuprofile bench-results/restore.cpu.prof -o bench-results/restore.test ./restore
	FERRY_VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench 'UploadPart|GetRange' -benchtime 10x ./internal/s3store
	@# The profiles cover each benchmark's setup (random data, and the
	@# restore benchmark's push): leave it out of the text.
	$(call bench_pprof,push,ChaCha8|chacha8rand|byteorder)
	$(call bench_pprof,restore,ChaCha8|chacha8rand|byteorder|uploader\.)
	@echo "profiles: bench-results/{push,restore}.cpu.{prof,txt}"

# bench_pprof NAME IGNORE: flat and cumulative top of bench-results/NAME.cpu.prof
define bench_pprof
	{ $(GO) tool pprof -top -nodecount 25 -ignore '$(2)' bench-results/$(1).cpu.prof; \
	  $(GO) tool pprof -top -cum -nodecount 60 -ignore '$(2)' bench-results/$(1).cpu.prof | sed -n '/flat%/,$$p'; \
	} > bench-results/$(1).cpu.txt 2>/dev/null
endef

## release: static ferry binaries for linux/amd64 and linux/arm64 (CGO off,
## -trimpath, version and commit stamped) in dist/ (git-ignored), with
## SHA256SUMS; verify with: cd dist && sha256sum -c SHA256SUMS
DIST              := $(CURDIR)/dist
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64

.PHONY: release image test-slurm
release:
	rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		echo "GOOS=$$os GOARCH=$$arch $(FERRY_BUILD) -o $(DIST)/ferry-$$os-$$arch ./cmd/ferry"; \
		GOOS=$$os GOARCH=$$arch $(FERRY_BUILD) -o $(DIST)/ferry-$$os-$$arch ./cmd/ferry; \
		$(GO) version -m $(DIST)/ferry-$$os-$$arch | grep -q 'CGO_ENABLED=0' || { echo "ferry-$$os-$$arch: not built with CGO_ENABLED=0"; exit 1; }; \
	done
	cp LICENSE NOTICE $(DIST)/
	cd $(DIST) && sha256sum ferry-* > SHA256SUMS && sha256sum -c SHA256SUMS
	@# The binary of this machine's platform, if built, says what it is.
	@host=$(DIST)/ferry-$$($(GO) env GOOS)-$$($(GO) env GOARCH); if [ -x $$host ]; then \
		out=$$($$host version) && echo "$$out" && \
		case "$$out" in "ferry $(VERSION) commit $(COMMIT) "*) ;; *) echo "$$host: version not stamped"; exit 1;; esac; fi

## image: the container image (Dockerfile) around the release binary of this
## machine's architecture and this machine's CA bundle, with no base image to
## pull; with buildah, podman or docker, whichever is installed first
## (IMAGE_BUILDER=podman to choose; Debian: apt-get install -y buildah).
## Also saved as an OCI archive in dist/ for `podman load` or `kind load`.
IMAGE         ?= ferry:$(VERSION)
IMAGE_ARCH    ?= $(shell $(GO) env GOARCH)
IMAGE_BUILDER ?= $(firstword $(foreach b,buildah podman docker,$(shell command -v $(b) 2>/dev/null)))
IMAGE_CA      ?= /etc/ssl/certs/ca-certificates.crt
image: release
	@[ -n "$(IMAGE_BUILDER)" ] || { echo "make image needs buildah, podman or docker (Debian: apt-get install -y buildah)"; exit 1; }
	@[ -s $(IMAGE_CA) ] || { echo "make image needs a CA bundle at $(IMAGE_CA) (Debian: apt-get install -y ca-certificates)"; exit 1; }
	rm -rf $(DIST)/image && mkdir -p $(DIST)/image
	cp $(DIST)/ferry-linux-$(IMAGE_ARCH) $(IMAGE_CA) LICENSE NOTICE $(DIST)/image/
	$(IMAGE_BUILDER) build --target prebuilt-image --build-arg TARGETOS=linux --build-arg TARGETARCH=$(IMAGE_ARCH) \
		--build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -f $(CURDIR)/Dockerfile -t $(IMAGE) $(DIST)/image
	@case "$(notdir $(IMAGE_BUILDER))" in \
		buildah) set -x; buildah push $(IMAGE) oci-archive:$(DIST)/ferry-image-linux-$(IMAGE_ARCH).tar:$(IMAGE) ;; \
		podman) set -x; podman save --format oci-archive -o $(DIST)/ferry-image-linux-$(IMAGE_ARCH).tar $(IMAGE) ;; \
		*) set -x; $(IMAGE_BUILDER) save -o $(DIST)/ferry-image-linux-$(IMAGE_ARCH).tar $(IMAGE) ;; \
	esac
	@echo "image $(IMAGE) built; archive: $(DIST)/ferry-image-linux-$(IMAGE_ARCH).tar"

## soak: `ferry agent` at its defaults (plus --keep-local 3) through
## SOAK_STEPS steps (default 5,000, a small DCP step every 100 ms, a large
## one every 50th, some deleted by the trainer, ferry prune now and then)
## against versitygw; prints RSS, descriptors, goroutines, inotify watches,
## journal and state size every 500 steps and fails when one grows
## (cmd/ferry-soak, about 9 min). SOAK_FLAGS for more (-every 100 ...).
SOAK_STEPS ?= 5000
SOAK_FLAGS ?=
.PHONY: soak
soak: build tools
	$(GO) build -o $(BIN)/ferry-soak ./cmd/ferry-soak
	$(BIN)/ferry-soak -ferry $(BIN)/ferry -versitygw $(VERSITYGW) -steps $(SOAK_STEPS) $(SOAK_FLAGS)

## test-slurm: deploy/slurm's batch script on a real one-host SLURM cluster
## (installs Debian's slurm-wlm and munge when missing, as root): preempted,
## requeued, restored, resumed, finished (scripts/test-slurm.sh)
test-slurm: build tools
	FERRY=$(BIN)/ferry TRAINSIM=$(BIN)/ferry-trainsim VERSITYGW=$(VERSITYGW) timeout 900 ./scripts/test-slurm.sh
