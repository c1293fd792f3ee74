#!/usr/bin/env bash
# Install the real claude CLI (npm package @anthropic-ai/claude-code) for integration/inference.
#
# Installs into a cache prefix (default: $HOME/.cache/mur/claude-cli, override with
# MUR_CLAUDE_PREFIX) rather than globally, and prints the binary's path on stdout (progress goes
# to stderr). Tests find the binary through, in order: $MUR_CLAUDE_BIN, `claude` on PATH, then
# $MUR_CLAUDE_PREFIX/node_modules/.bin/claude (see integration/inference/conftest.py).
#
# Usage:  .ci/install-claude.sh            # install (no-op when already installed)
#         export MUR_CLAUDE_BIN="$(.ci/install-claude.sh)"
#
# MUR_CLAUDE_VERSION pins the package version (default: the one verified on this project's CI).
set -euo pipefail

prefix="${MUR_CLAUDE_PREFIX:-$HOME/.cache/mur/claude-cli}"
version="${MUR_CLAUDE_VERSION:-2.1.332}"
pkg="$prefix/node_modules/@anthropic-ai/claude-code"
bin="$prefix/node_modules/.bin/claude"

quiet_version() {
  DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 "$bin" --version 2>/dev/null
}

if ! command -v npm >/dev/null 2>&1; then
  echo "install-claude: npm not found (apt-get install nodejs npm)" >&2
  exit 1
fi

if ! quiet_version >/dev/null || [ "${MUR_CLAUDE_REINSTALL:-0}" = "1" ]; then
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@${version}" >&2
  # The CLI ships as a platform-native optional dependency that the package's postinstall
  # (install.cjs) links into bin/. npm skips postinstall when it thinks the tree is already up
  # to date, so run it explicitly whenever the binary does not answer yet.
  if ! quiet_version >/dev/null; then
    (cd "$prefix" && node "$pkg/install.cjs") >&2
  fi
fi

quiet_version >&2 || { echo "install-claude: $bin does not run" >&2; exit 1; }
echo "$bin"
