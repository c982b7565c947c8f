#!/usr/bin/env bash
# Installs the Debian tools the tests use and the npm/Go toolchains do not
# bring: promtool (Debian's `prometheus` package), which checks the /metrics
# exposition, and haproxy, which the scale-out tests (host/scaleout) put in
# front of two mcpvisor replicas, and chromium, the headless browser that the
# web console's test (host/hardening/console_test.go) drives, and postgresql,
# the database of the official MCP registry that host/cli's registry test
# runs (docs/registry.md). Idempotent: does nothing for a tool already
# installed. Needs root and apt-get when it has work to do; otherwise it says
# what to install and fails, so a test never silently skips its check.
set -euo pipefail

# Debian installs haproxy in /usr/sbin, which a non-root PATH may lack.
PATH="$PATH:/usr/sbin:/sbin"

missing=()   # Debian packages to install
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# Debian keeps the server binaries (initdb, postgres) out of PATH.
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
[ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ] || missing+=(postgresql)

if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-tools: installing Debian's ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

status=0
if command -v promtool >/dev/null 2>&1; then
  echo "system-tools: promtool $(promtool --version 2>&1 | head -1 | awk '{print $3}')"
else
  echo "system-tools: promtool is missing: install Debian's prometheus package (apt-get install prometheus), which ships it" >&2
  status=1
fi
if command -v haproxy >/dev/null 2>&1; then
  echo "system-tools: haproxy $(haproxy -v 2>&1 | head -1 | awk '{print $3}')"
else
  echo "system-tools: haproxy is missing: install Debian's haproxy package (apt-get install haproxy)" >&2
  status=1
fi
if command -v chromium >/dev/null 2>&1; then
  echo "system-tools: $(chromium --version 2>/dev/null | head -1)"
else
  echo "system-tools: chromium is missing: install Debian's chromium package (apt-get install chromium)" >&2
  status=1
fi
if [ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ]; then
  echo "system-tools: $("$(pg_bin)/postgres" --version)"
else
  echo "system-tools: postgresql is missing: install Debian's postgresql package (apt-get install postgresql)" >&2
  status=1
fi
exit "$status"
