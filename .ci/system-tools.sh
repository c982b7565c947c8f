#!/usr/bin/env bash
# Installs the Debian tools the tests use and the npm/Go toolchains do not
# bring: promtool (Debian's `prometheus` package), which checks the /metrics
# exposition. Idempotent: does nothing when the tool is already on PATH.
# Needs root and apt-get when it has work to do; otherwise it says what to
# install and fails, so a test never silently skips its check.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
  echo "system-tools: promtool $(promtool --version 2>&1 | head -1 | awk '{print $3}')"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-tools: installing Debian's prometheus package for promtool"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  command -v promtool >/dev/null 2>&1 && exit 0
fi
echo "system-tools: promtool is missing: install Debian's prometheus package (apt-get install prometheus), which ships it" >&2
exit 1
