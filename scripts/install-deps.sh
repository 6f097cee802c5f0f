#!/usr/bin/env bash
# Installs the Debian packages fathom builds and tests with; does nothing when all are there.
# This list is all a fresh Debian 12 machine needs (scripts/fresh-machine-check.sh proves it):
# ca-certificates gives npm its TLS trust store (nodejs only recommends it).
set -euo pipefail
packages=(cmake ninja-build g++ ca-certificates libgtest-dev libdnnl-dev nlohmann-json3-dev python3-torch python3-numpy python3-matplotlib libpcre2-dev libutf8proc-dev libcpp-httplib-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node (for the tests against the openai client and @lenml/tokenizers): Debian's when absent.
command -v npm > /dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# npm packages pinned by tests/node/package-lock.json.
node_dir="$(dirname "$0")/../tests/node"
if [ ! -d "$node_dir/node_modules" ] || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules" ]; then
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
