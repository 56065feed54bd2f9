# natsdelay build and test entry points.
#
#   make test            go vet, staticcheck and the function length check, beside every test with the race detector
#   make test T=Name     only tests matching Name
#   make test PKG=./keys only one package
#   make bench           the Go benchmarks, then natsdelay-bench against JetStream
#   make package         release binaries, .deb, .rpm, image and chart into dist/
#   make package-test    build the linux/amd64 artifacts and check them (root, podman, dpkg)
#   make soak            the crash loop, outage, adversarial and cluster tests, larger
#   make fuzz            each fuzz target for FUZZTIME (default 30s), one by one
#   make proto           regenerate the protobuf code (needs protoc)
#   make package         release artifacts in dist/: static binaries, .deb, .rpm, images, the chart, SHA256SUMS

GO      ?= go
PKG     ?= ./...
T       ?=
BENCH   ?= .
FUZZTIME ?= 30s
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOBIN   := $(shell $(GO) env GOPATH)/bin

RUN_FLAG := $(if $(T),-run '$(T)',)
# The tests against earlier versions (the rolling upgrades from the
# previous release, an older version's refusal of this one's store and of
# a cluster node's directory) build those versions from the history
# first, minutes of CPU: they run in package-test, with the release's
# other checks, unless T names them.
OLDER_TESTS := ^(TestCluster_RollingUpgrade|TestCluster_VersionBeforeRaftLog|TestServe_OlderVersion)
SKIP_FLAG := $(if $(T),,-skip '$(OLDER_TESTS)')

# Release builds. VERSION is what natsdelay version prints and what the
# packages are called: the tag at HEAD, or the last tag and the commits
# past it. The tools are fetched through the module proxy at pinned
# versions on first use; they are not dependencies of the module.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.1.0-dev)
DIST      ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64 windows/amd64
IMAGE_REPO ?= natsdelay
NFPM      := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
HELM      := helm.sh/helm/v4/cmd/helm@v4.3.2
RELEASE_LDFLAGS := -s -w -X main.releaseVersion=$(VERSION)

.PHONY: build test gotest vet lint bench proto fuzz soak package linux-package package-test

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

# go test starts packages in the order they are named, so the longest
# come first and the short ones fill in beside them; named twice, a
# package runs once. Within a package, parallel tests run two at a time
# (one per core, go test's default): at four, on two cores doing other
# work, integration took no less time and its tests of TTLs and ack waits
# missed their windows.
LONG_TEST_PKGS := ./integration ./cmd/natsdelay ./cmd/natsdelay/internal/console ./cmd/natsdelay-bench ./cmd/internal/bench ./delaystore ./delaystore/raftstore
TEST_PKGS := $(if $(filter ./...,$(PKG)),$(LONG_TEST_PKGS) ./...,$(PKG))

gotest:
	$(GO) test -race -count=1 -p 4 -timeout 15m $(RUN_FLAG) $(SKIP_FLAG) $(TEST_PKGS)

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
# limits up to 10,000; a move of partitions between two cells with a
# SIGKILL of one end at each of its steps, five times over; a backlog of
# 100,000 due on a subject nobody listens to, beside bad consumers; a
# tenant with 100,000 due over 1,000 subjects, beside another tenant).
# NB: the adversarial mix runs without the race detector here: at soak
# size its volume is what matters, and under the race detector the store
# cannot keep up on two cores. make test runs it with the race detector at
# its quick size.
soak:
	NATSDELAY_SOAK=1 $(GO) test -race -count=1 -timeout 60m -run 'CrashLoop|Outage|ClusterProcess_KillLeader|ClusterProcess_PausedLeader|Bulk_.*SIGKILL|Fleet_Move_SIGKILL|Consumers_BadOnes|TenantDoesNotDelayAnother' ./integration
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Adversarial' -v ./integration
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Soak|LeaderCrash|PipelineAnswered' -v ./delaystore/raftstore
	NATSDELAY_SOAK=1 $(GO) test -count=1 -timeout 20m -run 'Bulk_Property' -v ./bridge

# package builds, for each of PLATFORMS, a static binary; for each linux
# one also a .deb and an .rpm (nfpm, cmd/internal/dist/nfpm.yaml) and an
# image (podman, cmd/internal/dist/Containerfile, saved as an OCI archive);
# then the Helm chart of docs/helm/natsdelay, and SHA256SUMS of it all.
# cmd/internal/dist's test runs it for linux/amd64 and checks what it made.
package:
	rm -rf $(DIST)
	mkdir -p $(DIST)
	for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; bin=$(DIST)/natsdelay-$(VERSION)-$$os-$$arch; \
		if [ $$os = windows ]; then bin=$$bin.exe; fi; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o $$bin ./cmd/natsdelay || exit 1; \
		if [ $$os = linux ]; then \
			$(MAKE) --no-print-directory linux-package ARCH=$$arch BINARY=$$bin || exit 1; \
		fi; \
	done
	$(GO) run $(HELM) package docs/helm/natsdelay --version $(VERSION:v%=%) --app-version $(VERSION) -d $(DIST)
	cd $(DIST) && sha256sum natsdelay* > SHA256SUMS

# linux-package is the .deb, the .rpm and the image of one linux BINARY of
# ARCH; package runs it.
# package-test builds the linux/amd64 artifacts and checks them
# (cmd/internal/dist): installs the .deb and runs it, verifies the unit,
# runs the image's binary, lints and renders the chart. It needs root,
# podman, dpkg and systemd-analyze, and fails without them. Then the tests
# against earlier versions (cmd/natsdelay): the rolling upgrades of a
# cluster from the previous release, and an older version's refusal of
# this one's store.
package-test:
	NATSDELAY_PACKAGE_TESTS=required $(GO) test -count=1 -timeout 30m -run 'TestPackage|TestGoInstall' -v ./cmd/internal/dist
	$(GO) test -race -count=1 -timeout 30m -run '$(OLDER_TESTS)' -v ./cmd/natsdelay

linux-package:
	VERSION=$(VERSION) ARCH=$(ARCH) BINARY=$(BINARY) $(GO) run $(NFPM) package --config cmd/internal/dist/nfpm.yaml --packager deb --target $(DIST)/
	VERSION=$(VERSION) ARCH=$(ARCH) BINARY=$(BINARY) $(GO) run $(NFPM) package --config cmd/internal/dist/nfpm.yaml --packager rpm --target $(DIST)/
	rm -rf $(DIST)/image-$(ARCH)
	mkdir -p $(DIST)/image-$(ARCH)/data
	cp $(BINARY) $(DIST)/image-$(ARCH)/natsdelay
	podman build --quiet --platform linux/$(ARCH) -f cmd/internal/dist/Containerfile \
		--build-arg VERSION=$(VERSION) --build-arg REVISION=$$(git rev-parse HEAD) \
		--build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) \
		-t $(IMAGE_REPO):$(VERSION:v%=%)-$(ARCH) $(DIST)/image-$(ARCH)
	podman save --quiet --format oci-archive -o $(DIST)/natsdelay-$(VERSION)-image-linux-$(ARCH).tar $(IMAGE_REPO):$(VERSION:v%=%)-$(ARCH)
	rm -rf $(DIST)/image-$(ARCH)

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
