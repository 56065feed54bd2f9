# natsdelay build and test entry points.
#
#   make test            go vet, then every test with the race detector
#   make test T=Name     only tests matching Name
#   make test PKG=./keys only one package
#   make bench           the Go benchmarks
#   make proto           regenerate the protobuf code (needs protoc)

GO      ?= go
PKG     ?= ./...
T       ?=
BENCH   ?= .
PROTOC_GEN_GO_VERSION := v1.36.12
GOBIN   := $(shell $(GO) env GOPATH)/bin

RUN_FLAG := $(if $(T),-run '$(T)',)

.PHONY: build test vet bench proto fuzz

build:
	$(GO) build -o bin/natsdelay ./cmd/natsdelay

vet:
	$(GO) vet $(PKG)

test: vet
	$(GO) test -race -count=1 -timeout 15m $(RUN_FLAG) $(PKG)

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 $(PKG)

proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=module=natsdelay delaystore/storedmessage.proto
