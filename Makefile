# weft: see README.md. `make demo` and `make test` install what they are missing.
GO      ?= go
BIN     := bin
PKGS    := ./...
MODULE  := github.com/weftnet/weft
# When make started: make test says how long its steps took.
MAKE_START := $(shell date +%s)
DEBS    := etcd-server iperf3 iputils-ping iptables nftables iproute2 containernetworking-plugins \
           containerd runc socat wireguard-go wireguard-tools systemd
# qemu-user-static runs the arm64 and 32-bit arm unit tests of `make cross`.
DEBS    += qemu-user-static
# conntrack flushes a lab NAT router's mappings (the sites tests).
DEBS    += conntrack
# docker.io's dockerd (20.10) loads bin/weftd-image.tar in TestDockerLoad, as a private daemon.
DEBS    += docker.io
export CGO_ENABLED ?= 0
# The flannel CNI plugin, to attach pods from weftd's subnet.env in tests (Debian's
# containernetworking-plugins gives bridge and host-local, but no longer flannel).
CNI_FLANNEL_PKG := github.com/containernetworking/plugins/plugins/meta/flannel@v0.9.1

.PHONY: stress all deps build flanneld image image-deps image-lock pin release test unit race cross cross-build fuzz lint vet fmt staticcheck demo bench bench-check clean pictures

all: build

# deps installs the Debian packages the tests, demo and benchmarks use (idempotent).
deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@test -x $(BIN)/cni/flannel || GOBIN=$(CURDIR)/$(BIN)/cni $(GO) install -trimpath $(CNI_FLANNEL_PKG)

# weftd --version names the commit: the toolchain stamps vcs.revision in a plain
# checkout; in a git worktree or with -buildvcs=false it cannot, so it is passed here.
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)

# bin/weftd-arm64 is weftd for arm64, which e2e's TestUDPUnderQEMU runs under qemu-user.
build:
	$(GO) build -ldflags='-X main.commit=$(COMMIT) -X main.version=$(VERSION)' -o $(BIN)/weftd ./cmd/weftd
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -ldflags='-X main.commit=$(COMMIT)' -o $(BIN)/weftd-arm64 ./cmd/weftd
	$(GO) build -o $(BIN)/weft-bench ./cmd/weft-bench
	$(GO) build -o $(BIN)/weft-cni/flannel ./cmd/weft-cni

# flanneld is the upstream flanneld, built from its Go module in test/flannel (cgo: its
# udp backend is C), for the mixed-cluster tests and as a row of `make bench`.
flanneld: $(BIN)/flanneld
$(BIN)/flanneld: test/flannel/go.mod test/flannel/go.sum
	cd test/flannel && CGO_ENABLED=1 $(GO) build -o $(CURDIR)/$(BIN)/flanneld github.com/flannel-io/flannel

# image builds weftd's container image without a daemon or a registry (cmd/weft-image):
# an OCI image index for every architecture kube-flannel ships (ALL_ARCHS), each image
# holding static weftd and weft-install, weft's flannel CNI plugin (cmd/weft-cni, as
# /flannel), and iptables (both backends) and nft from that architecture's Debian
# .debs, exactly the versions and sha256 sums in cmd/weft-image/debs.lock (cached in
# ~/.cache/weft/debs), tagged $(IMAGE_REPO):$(VERSION) (`make image VERSION=x.y.z`).
# Same source, Go version and lock, same digests: the binaries carry no VCS stamp,
# build id or path. It prints each image's compressed size and the index digest;
# `make pin` writes that tag and digest into deploy/, `make image-lock` refreshes
# the lock. Load it with `ctr -n k8s.io images import bin/weftd-image.tar` or
# `docker load -i bin/weftd-image.tar` (deploy/README.md).
IMAGE_TAR   := $(BIN)/weftd-image.tar
IMAGE_DEBS  := apt dpkg debian-archive-keyring
# VERSION is weftd's version (-X main.version) and the image's tag; releases set it
# (make release VERSION=x.y.z). Otherwise it names a development build of the next
# version, never a released one: TestPinnedVersion holds deploy/ to that.
VERSION     := 0.2.0-dev
IMAGE_REPO  := ghcr.io/weftnet/weftd
IMAGE_BUILD := CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -buildvcs=false \
               -ldflags='-s -w -buildid= -X main.version=$(VERSION)'
image-deps:
	@missing=""; for p in $(IMAGE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
image: image-deps
	@set -e; for a in $(ALL_ARCHS); do \
		echo "build weftd, weft-install, weft-cni for linux/$$a"; \
		GOARCH=$$a GOARM=7 $(IMAGE_BUILD) -o $(BIN)/image/$$a/ ./cmd/weftd ./cmd/weft-install ./cmd/weft-cni; \
	done
	$(GO) run ./cmd/weft-image -o $(IMAGE_TAR) -tag $(IMAGE_REPO):$(VERSION) -bins $(BIN)/image

# image-lock re-resolves the image's Debian packages for every architecture (private
# apt state per architecture in ~/.cache/weft/apt, the machine's sources untouched) and
# rewrites cmd/weft-image/debs.lock; commit it, then make image && make pin.
image-lock: image-deps
	$(GO) run ./cmd/weft-image lock

# pin writes the tag and index digest of bin/weftd-image.tar into deploy/weft.yml,
# deploy/weft-cleanup.yml, deploy/weft-uninstall.yml and deploy/chart/weft/values.yaml; TestPinned (in make test)
# fails until it has been run after a change to the image.
pin:
	$(GO) run ./cmd/weft-image pin -image $(IMAGE_TAR)

# release writes a release into RELEASE_DIR, all or nothing: for each of RELEASE_ARCHS,
# weftd, weft-install and weft-cni (built as for the image) with an SBOM each (the Go
# modules the binary embeds, by cyclonedx-gomod); the image tar tagged VERSION; the
# chart (helm package, version and appVersion VERSION); weft.yml, weft-cleanup.yml and weft-uninstall.yml;
# the chart and manifests naming the image by tag and digest; the systemd unit
# weftd.service and its drop-in flanneld-sysconfig.conf; and SHA256SUMS. It
# refuses a VERSION not given, not semantic, or without a `## [VERSION]` in CHANGELOG.
RELEASE_DIR     ?= $(BIN)/release/$(VERSION)
RELEASE_ARCHS   ?= $(ALL_ARCHS)
CHANGELOG       ?= CHANGELOG.md
CYCLONEDX_GOMOD := github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
RELEASE_TOOL     = $(GO) run ./cmd/weft-image release -version '$(VERSION)' -changelog '$(CHANGELOG)'
release: image-deps
	@if [ "$(origin VERSION)" != "command line" ]; then \
		echo "make release: name the version: make release VERSION=x.y.z" >&2; exit 2; fi
	$(RELEASE_TOOL) -check
	@set -e; top=$$(dirname '$(RELEASE_DIR)'); mkdir -p "$$top"; bins=$$(mktemp -d "$$top/.bins.XXXXXX"); \
	trap 'rm -rf "$$bins"' EXIT; trap 'exit 130' INT TERM; \
	for a in $(RELEASE_ARCHS); do \
		echo "build weftd, weft-install, weft-cni $(VERSION) for linux/$$a"; \
		GOARCH=$$a GOARM=7 $(IMAGE_BUILD) -o $$bins/$$a/ ./cmd/weftd ./cmd/weft-install ./cmd/weft-cni; \
	done; \
	$(RELEASE_TOOL) -bins "$$bins" -o '$(RELEASE_DIR)' -platforms '$(RELEASE_ARCHS)' -sbom '$(GO) run $(CYCLONEDX_GOMOD)'

STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/tools/staticcheck

# lint: gofmt, go vet and staticcheck (pinned, installed into bin/tools on first use).
lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

$(STATICCHECK):
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)

# test runs everything as root: lint, the race detector over the tests that need nothing
# from outside, then every test, e2e in network namespaces included. The packages whose
# tests time a lab or the CPU (LAB_PKGS: e2e, the bench lab's soak and matrix, proxy's
# idle-CPU window) run last, one test binary at a time, after every other package has
# finished: nothing else of make test shares the two cores with them.
LAB_PKGS := ./proxy/ ./bench/ ./e2e/
TEST_ENV := WEFT_E2E=1 WEFT_BIN=$(CURDIR)/$(BIN)
test: deps build flanneld image lint race cross fuzz
	@echo "make test: the steps before go test took $$(( $$(date +%s) - $(MAKE_START) )) s"
	$(TEST_ENV) $(GO) test -count=1 -p 1 -timeout 30m $$($(GO) list $(PKGS) | grep -v -x -e '$(MODULE)/proxy' -e '$(MODULE)/bench' -e '$(MODULE)/e2e')
	$(TEST_ENV) $(GO) test -count=1 -p 1 -timeout 60m $(LAB_PKGS)
	@echo "make test: $$(( $$(date +%s) - $(MAKE_START) )) s in all"

# stress runs the e2e tests RUN matches N times in a row beside a CPU hog on every core
# and counts the failures (test/stress/stress.sh): every new e2e test passes it 50 times.
N ?= 50
stress: build
	test/stress/stress.sh '$(RUN)' $(N)

# unit runs the tests that need nothing from outside: no root, no etcd, no namespaces.
unit:
	$(GO) test -short $(PKGS)

# fuzz runs every fuzz target (func Fuzz* in a _test.go file of this module) for
# FUZZTIME each; their seeds and testdata/fuzz corpora also run in every plain go test.
FUZZTIME ?= 10s
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline exceeded"
# when -fuzztime ends while a worker is mid-call (go.dev/issue/75804, fixed in 1.27);
# CI failed on it once (FuzzParse, no crasher). The go command fetches this toolchain
# from the module proxy like a module (76 MB, once); everything else stays on go.mod's Go.
FUZZ_TOOLCHAIN ?= go1.27.3
fuzz:
	@set -e; for f in $$(git ls-files '*_test.go' | grep -v '^test/' | xargs grep -l '^func Fuzz'); do \
		for fn in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
			echo "fuzz ./$$(dirname $$f) $$fn ($(FUZZTIME))"; \
			GOTOOLCHAIN=$(FUZZ_TOOLCHAIN) $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f); \
		done; \
	done

# race runs the same tests under the race detector (which needs cgo).
race:
	CGO_ENABLED=1 $(GO) test -race -short -count=1 $(PKGS)

# cross runs the -short tests of the data path and lease packages as arm64 and as 32-bit
# arm (v7) under qemu-user, where 64-bit atomics need 8-byte alignment, int is 32 bits
# and unix.* structs have other field sizes; -exec names the emulator, so no binfmt_misc
# registration is needed. go vet for arm checks atomic use; weftd is built for the two
# emulated architectures (their packages are compiled for the tests already). The other
# architectures kube-flannel ships are `make cross-build`, kept out of `make test`: each
# compiles client-go and the etcd client anew, about 75 s a piece on a cold 2-core machine.
CROSS_PKGS  := ./proxy/ ./lease/... ./encap/... ./paths/ ./tun/...
# Left out under emulation: tests whose subject is running programs, not the
# architecture. os/exec under qemu-user can hang: a child whose exec failed (the
# extension backend's missing-program case) once never exited, and the arm64 run of
# encap timed out after 10 minutes. They run natively in `make unit` and `make race`.
CROSS_SKIP  := ^(TestExtension|TestWireGuardDropLines)
CROSS_ARCHS := arm64 arm
ALL_ARCHS   := amd64 arm64 arm ppc64le s390x riscv64
QEMU_ARM64  ?= /usr/bin/qemu-aarch64-static
QEMU_ARM    ?= /usr/bin/qemu-arm-static
cross: deps
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -short -count=1 -timeout 10m -skip '$(CROSS_SKIP)' -exec $(QEMU_ARM64) $(CROSS_PKGS)
	CGO_ENABLED=0 GOARCH=arm GOARM=7 $(GO) test -short -count=1 -timeout 10m -skip '$(CROSS_SKIP)' -exec $(QEMU_ARM) $(CROSS_PKGS)
	CGO_ENABLED=0 GOARCH=arm GOARM=7 $(GO) vet $(CROSS_PKGS)
	@set -e; for a in $(CROSS_ARCHS); do \
		echo "build ./cmd/weftd for linux/$$a"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a GOARM=7 $(GO) build -o /dev/null ./cmd/weftd; \
	done

# cross-build builds weftd for every architecture kube-flannel ships.
cross-build:
	@set -e; for a in $(ALL_ARCHS); do \
		echo "build ./cmd/weftd for linux/$$a"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a GOARM=7 $(GO) build -o /dev/null ./cmd/weftd; \
	done

demo: deps build flanneld
	$(BIN)/weft-bench demo --daemon flanneld=$(BIN)/flanneld

bench: deps build flanneld
	$(GO) test -run '^$$' -bench . -benchmem ./proxy/
	$(BIN)/weft-bench run --out bench/out --daemon flanneld=$(BIN)/flanneld
	$(BIN)/weft-bench sites --out bench/out/sites

# bench-check holds one run to weft's goals (bench.Goals: ratios between rows of the
# same run, and weftd udp's idle CPU over 60 s) and fails when one is missed. It runs the
# rows the goals name (kernel-vxlan, weftd-udp, weftd-wireguard; report in
# bench/out/check), or with IN=DIR checks an earlier run's DIR/report.json instead
# (make bench-check IN=bench/out).
bench-check: deps build
	$(BIN)/weft-bench check $(if $(IN),--in $(IN),--out bench/out/check)

# pictures draws each docs/pictures/X.svg from X.dot beside it with Graphviz's dot
# (installed when missing) and puts `<!-- source: X.dot sha256:... -->` right after the
# SVG's XML declaration: TestPictures (encap/factory) fails on an SVG older than its
# source until this is run again.
PICTURES := $(wildcard docs/pictures/*.dot)
pictures:
	@command -v dot >/dev/null || { echo "installing: graphviz"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphviz >/dev/null; }
	@set -e; for f in $(PICTURES); do \
		svg=$${f%.dot}.svg; sum=$$(sha256sum "$$f" | cut -d' ' -f1); \
		echo "dot -Tsvg $$f -o $$svg"; \
		dot -Tsvg "$$f" -o "$$svg.tmp"; \
		head -n1 "$$svg.tmp" | grep -q '^<?xml ' || { echo "$$svg: dot wrote no XML declaration" >&2; rm -f "$$svg.tmp"; exit 1; }; \
		sed -i "1a <!-- source: $$(basename "$$f") sha256:$$sum -->" "$$svg.tmp"; \
		mv "$$svg.tmp" "$$svg"; \
	done

clean:
	rm -rf $(BIN) bench/out
