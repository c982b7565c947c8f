# mcpvisor — build, run and test.
#
#   make run     build, then serve config.hcl (streamable HTTP at http://127.0.0.1:8811/mcp)
#   make test    build, install the npm peers, vet, gofmt check, all tests with -race
#   make dist    release binaries for every platform into dist/, with SHA256SUMS
#
# Plain POSIX make syntax apart from $(CURDIR); recipes are /bin/sh.

GO      ?= go
# -mod=readonly: a build or test never rewrites go.mod/go.sum behind your back.
GOFLAGS ?= -mod=readonly
export GOFLAGS

BIN_DIR     = bin
NPM_DIR     = $(CURDIR)/.cache/npm
CONFIG     ?= config.hcl
TEST_FLAGS ?= -race -count=1 -timeout 15m
BENCHTIME  ?= 2s

# The environment the end-to-end tests read (see host/e2e/README.md).
E2E_ENV = MCPVISOR_E2E=1 MCPVISOR_NPM_DIR=$(NPM_DIR) MCPVISOR_BIN_DIR=$(CURDIR)/$(BIN_DIR)

# Go files gofmt must accept: everything but caches, build output and npm trees.
GOFILES_CMD = find . \( -path ./.cache -o -path ./.git -o -path ./$(BIN_DIR) -o -name node_modules \) -prune -o -name '*.go' -type f -print

.PHONY: all build mcpvisor examples plugins run test e2e bench fuzz npm-tools system-tools vet fmt fmt-check staticcheck lint clean distclean dist version

all: build

build: mcpvisor examples plugins

mcpvisor:
	$(GO) build -o $(BIN_DIR)/mcpvisor .

# Every examples/servers/<name>/ holding a main package becomes bin/<name>.
examples:
	@for d in examples/servers/*/; do \
	  [ -d "$$d" ] || continue; \
	  d=$${d%/}; name=$${d##*/}; \
	  [ "$$($(GO) list -e -f '{{.Name}}' "./$$d" 2>/dev/null)" = main ] || continue; \
	  echo "$(GO) build -o $(BIN_DIR)/$$name ./$$d"; \
	  $(GO) build -o "$(BIN_DIR)/$$name" "./$$d" || exit 1; \
	done

# Every plugins/<name>/ holding a main package becomes bin/mcpvisor-transport-<name>.
plugins:
	@for d in plugins/*/; do \
	  [ -d "$$d" ] || continue; \
	  d=$${d%/}; name=$${d##*/}; \
	  [ "$$($(GO) list -e -f '{{.Name}}' "./$$d" 2>/dev/null)" = main ] || continue; \
	  echo "$(GO) build -o $(BIN_DIR)/mcpvisor-transport-$$name ./$$d"; \
	  $(GO) build -o "$(BIN_DIR)/mcpvisor-transport-$$name" "./$$d" || exit 1; \
	done

# Release builds: mcpvisor and the first-party transport plugins
# (plugins/<name>/ with a main package, not plugins/internal) for every
# DIST_TARGETS platform, as static binaries (CGO off, -trimpath), into
# DIST_DIR/mcpvisor_<version>_<os>_<arch>/, plus a .tar.gz (.zip for
# windows) of each and DIST_DIR/SHA256SUMS over the archives and binaries
# (check with `sha256sum -c SHA256SUMS`). VERSION defaults to what
# `make version` prints, COMMIT to `git rev-parse HEAD`;
# both are stamped into host.Version and host.Commit, which
# `mcpvisor version` prints. The container image builds from source:
#   docker build -f examples/deploy/Dockerfile --build-arg VERSION=... --build-arg COMMIT=... -t mcpvisor .
# `make version`: a semantic version in every build. A commit tagged
# vX.Y.Z is X.Y.Z; any other is host.Version's X.Y.Z-dev with the short
# commit as build metadata (0.1.0-dev+0123456789ab, .dirty with
# uncommitted changes; +unknown outside a checkout).
version:
	@base=$$(sed -n 's/^var Version = "\([0-9]*\.[0-9]*\.[0-9]*\)-dev"$$/\1/p' host/host.go); \
	tag=$$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); \
	if [ -n "$$tag" ] && [ -z "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then echo "$${tag#v}"; exit 0; fi; \
	hash=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	dirty=; [ "$$hash" = unknown ] || [ -z "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=.dirty; \
	echo "$$base-dev+$$hash$$dirty"

DIST_DIR     ?= dist
DIST_TARGETS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
dist:
	@set -e; \
	version="$(VERSION)"; [ -n "$$version" ] || version=$$($(MAKE) -s --no-print-directory version); \
	commit="$(COMMIT)"; [ -n "$$commit" ] || commit=$$(git rev-parse HEAD 2>/dev/null || echo unknown); \
	ldflags="-s -w -X github.com/mcpvisor/mcpvisor/host.Version=$$version -X github.com/mcpvisor/mcpvisor/host.Commit=$$commit"; \
	if command -v sha256sum >/dev/null 2>&1; then sum="sha256sum"; else sum="shasum -a 256"; fi; \
	rm -rf "$(DIST_DIR)"; mkdir -p "$(DIST_DIR)"; \
	for t in $(DIST_TARGETS); do \
	  os=$${t%/*}; arch=$${t#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
	  name=mcpvisor_$${version}_$${os}_$${arch}; out="$(DIST_DIR)/$$name"; \
	  echo "GOOS=$$os GOARCH=$$arch $(GO) build -o $$out/mcpvisor$$ext ."; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$$ldflags" -o "$$out/mcpvisor$$ext" .; \
	  for d in plugins/*/; do \
	    d=$${d%/}; p=$${d##*/}; \
	    [ "$$($(GO) list -e -f '{{.Name}}' "./$$d" 2>/dev/null)" = main ] || continue; \
	    echo "GOOS=$$os GOARCH=$$arch $(GO) build -o $$out/mcpvisor-transport-$$p$$ext ./$$d"; \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$$ldflags" -o "$$out/mcpvisor-transport-$$p$$ext" "./$$d"; \
	  done; \
	  cp README.md "$$out/"; \
	  if [ "$$os" = windows ]; then \
	    if command -v zip >/dev/null 2>&1; then (cd "$(DIST_DIR)" && zip -qr "$$name.zip" "$$name"); fi; \
	  else \
	    (cd "$(DIST_DIR)" && tar -czf "$$name.tar.gz" "$$name"); \
	  fi; \
	done; \
	(cd "$(DIST_DIR)" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs $$sum > SHA256SUMS); \
	echo "$(DIST_DIR)/SHA256SUMS: mcpvisor $$version ($$commit)"

run: build
	./$(BIN_DIR)/mcpvisor run -config $(CONFIG)

npm-tools:
	bash .ci/npm-tools.sh $(NPM_DIR)

# Debian tools the tests use (promtool, from the prometheus package; haproxy).
system-tools:
	bash .ci/system-tools.sh

vet:
	$(GO) vet ./...
	@# The platform-specific pieces (the process group keeper and /proc
	@# reads on Linux, job objects on Windows, peer credentials) have one
	@# file per platform; keep them in step: macOS and Windows must build
	@# and vet too. Tests that need Unix signals are //go:build unix.
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...

fmt:
	$(GOFILES_CMD) | xargs gofmt -w

fmt-check:
	@files=$$($(GOFILES_CMD) | xargs gofmt -l); \
	if [ -n "$$files" ]; then \
	  echo "gofmt: these files need formatting (run 'make fmt'):"; \
	  echo "$$files"; \
	  exit 1; \
	fi

# staticcheck, pinned, installed by `go install` into .cache/bin (the
# module proxy is all it needs). The one finding allowed is SA1019 on the
# protocol features MCP 2026-07-28 deprecates (SEP-2577: logging, sampling,
# roots): a proxy must keep carrying them for the clients and servers of
# earlier versions. The filter keeps only those messages out; every other
# finding, and any failure of staticcheck itself, fails the target.
STATICCHECK_VERSION = v0.8.2
STATICCHECK         = .cache/bin/staticcheck-$(STATICCHECK_VERSION)
STATICCHECK_ALLOWED = is deprecated: the [a-z]* feature is deprecated as of protocol version 2026-07-28 (SEP-2577)

$(STATICCHECK):
	mkdir -p .cache/bin
	GOBIN=$(CURDIR)/.cache/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv .cache/bin/staticcheck $@

staticcheck: $(STATICCHECK)
	@out=$$(./$(STATICCHECK) -f text ./... 2>&1); rc=$$?; \
	bad=$$(printf '%s\n' "$$out" | grep -v -e '^$$' -e '$(STATICCHECK_ALLOWED)'); \
	if [ -n "$$bad" ] || { [ $$rc -ne 0 ] && [ -z "$$out" ]; }; then \
	  echo "staticcheck $(STATICCHECK_VERSION): fix these findings:"; \
	  printf '%s\n' "$$bad"; \
	  exit 1; \
	fi

lint: vet fmt-check staticcheck

test: build npm-tools system-tools lint
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) ./...

# Only the end-to-end tests against the real npm peers.
e2e: build npm-tools
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) -v ./host/e2e/

# The benchmarks of docs/design.md §12 (host/bench, host/internal/plugin): a call through
# mcpvisor versus the same call made directly (stdio and HTTP, c=1 and
# c=32), SIGKILL → next successful call, an expired-session call, startup of
# 16 servers versus one, tool search over five npm servers (recall@5, MRR,
# tools/list bytes; docs/discovery.md). Every row measures its reference in the same run
# and prints ratios and a "target met/missed" line; see host/bench/README.md.
# Only benchmarks run (-run '^$$'); -timeout turns a hang into a stack dump.
bench: build npm-tools
	$(E2E_ENV) $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count=1 -timeout 5m ./host/...

# Runs every fuzz target for FUZZTIME each (`make test` runs their seed
# corpora only). New findings land in the package's testdata/fuzz.
FUZZTIME ?= 20s
fuzz:
	@set -e; grep -rl --include='*_test.go' '^func Fuzz' host shared plugins examples 2>/dev/null | while read -r f; do \
	  pkg=./$$(dirname $$f); \
	  for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "$(GO) test -run '^$$' -fuzz '^$$fn$$' -fuzztime $(FUZZTIME) $$pkg"; \
	    $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

clean:
	rm -rf $(BIN_DIR) $(DIST_DIR)

# Also drops the npm peers; the next test run downloads them again.
distclean: clean
	rm -rf .cache
