# natsdelay build and test entry points.
#
#   make test            go vet, staticcheck and the function length check, beside every test with the race detector
#   make test T=Name     only tests matching Name
#   make test PKG=./keys only one package
#   make bench           the Go benchmarks, then natsdelay-bench against JetStream
#   make soak            the crash loop, outage, adversarial and cluster tests, larger
#   make fuzz            each fuzz target for FUZZTIME (default 30s), one by one
#   make proto           regenerate the protobuf code (needs protoc)

GO      ?= go
PKG     ?= ./...
T       ?=
BENCH   ?= .
FUZZTIME ?= 30s
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOBIN   := $(shell $(GO) env GOPATH)/bin

RUN_FLAG := $(if $(T),-run '$(T)',)

.PHONY: build test gotest vet lint bench proto fuzz soak

build:
	$(GO) build -o bin/natsdelay ./cmd/natsdelay

vet:
	$(GO) vet $(PKG)

# lint runs staticcheck at a pinned version, fetched through the module
# proxy on first use; it is not a dependency of the module. It then fails
# on any function over 80 lines outside tests and generated code.
lint:
	$(GO) run $(STATICCHECK) $(PKG)
	$(GO) run ./cmd/internal/funclen $(PKG)

# test runs the checks and the tests side by side: the tests spend most of
# their time waiting on processes, networks and timers, so the checks use
# CPU the tests leave idle. For the same reason up to four test binaries
# run at once (go test's default is one per core). Each part's output is
# printed a line at a time, never mixed within a line; any part that fails
# fails test.
test:
	$(MAKE) --no-print-directory --output-sync=line -j3 vet lint gotest

gotest:
	$(GO) test -race -count=1 -p 4 -timeout 15m $(RUN_FLAG) $(PKG)

# The crash-loop, NATS-outage, cluster leader-kill and adversarial tests at
# soak size (200 kills per engine; 120 kills per engine inside the planning
# of 200 recurring schedules; 60 per engine inside edits of 16
# schedules; 100 cluster leader kills; 12 leader pauses
# of 5 to 20 s, then a SIGTERM of every node; 1,000 Raft pipelines a
# follower fails; 30,000 good messages
# beside 60 s of hostile traffic; a bulk cancel of 1,000,000 messages
# across 1,000 subjects with a SIGKILL midway; a bulk FIRE and a bulk
# RESCHEDULE of 100,000 with 17 SIGKILLs inside their steps; bulk steps
# against a model in 400 rounds, and in rounds of 12,000 messages with
# limits up to 10,000).
# NB: the adversarial mix runs without the race detector here: at soak
# size its volume is what matters, and under the race detector the store
# cannot keep up on two cores. make test runs it with the race detector at
# its quick size.
soak:
	NATSDELAY_SOAK=1 $(GO) test -race -count=1 -timeout 60m -run 'CrashLoop|Outage|ClusterProcess_KillLeader|ClusterProcess_PausedLeader|Bulk_.*SIGKILL' ./integration
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Adversarial' -v ./integration
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Soak|LeaderCrash|PipelineAnswered' -v ./delaystore/raftstore
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Bulk_Property' -v ./bridge

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 $(PKG)
	$(GO) build -o bin/ ./cmd/natsdelay ./cmd/natsdelay-bench
	bin/natsdelay-bench

# NB: go test -fuzz takes one target and one package at a time, so each
# target runs on its own; make test already runs their seed corpora.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzParseTag$$' -fuzztime $(FUZZTIME) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzParseSchedule$$' -fuzztime $(FUZZTIME) ./bridge
	$(GO) test -run '^$$' -fuzz '^FuzzParseAck$$' -fuzztime $(FUZZTIME) ./bridge
	$(GO) test -run '^$$' -fuzz '^FuzzAPIRequest$$' -fuzztime $(FUZZTIME) ./bridge
	$(GO) test -run '^$$' -fuzz '^FuzzSpec_After$$' -fuzztime $(FUZZTIME) ./dispatch/recur
	$(GO) test -run '^$$' -fuzz '^FuzzSpec_After_NeverPastMaxTime$$' -fuzztime $(FUZZTIME) ./dispatch/recur

proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=module=github.com/natsdelay/natsdelay delaystore/storedmessage.proto
