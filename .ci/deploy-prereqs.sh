#!/usr/bin/env bash
# What the deploy integration tests need from the machine, built once and cached where the machine
# keeps things ($MUR_CI_CACHE, default /var/cache/mur-ci): Debian packages, the local base image
# (debootstrap + docker import, no registry), mur's VM images for the kernel matrix (6.1 = Landlock
# ABI 2, 6.12 = ABI 6; `mur vm image`, keyed by their inputs, one shared debootstrap), and the pinned
# runtime bundle. Called by .ci/run after dockerd is up; idempotent; the slow builds run in parallel.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${MUR_CI_CACHE:-/var/cache/mur-ci}"
export MUR_CI_CACHE="$cache"
mkdir -p "$cache"
log() { printf '== deploy-prereqs: %s (%ss)\n' "$*" "$SECONDS" >&2; }

packages=(debootstrap e2fsprogs qemu-system-x86 qemu-utils genisoimage cloud-init openssh-client openssh-server
          netcat-openbsd docker.io)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if (( ${#missing[@]} )); then
  log "apt-get install ${missing[*]}"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
export MUR_BUNDLE_CACHE="$cache/bundles"
export MUR_VM_IMAGES="${MUR_VM_IMAGES:-$cache/vm-images}"
mkdir -p "$MUR_BUNDLE_CACHE"

pids=()
names=()
run_bg() {  # name, command...: run in the background, output to a log in the cache
  local name="$1"; shift
  ( "$@" ) >"$cache/prereqs-$name.log" 2>&1 &
  pids+=("$!"); names+=("$name")
}

docker info >/dev/null 2>&1 || { echo "deploy-prereqs: no Docker engine running" >&2; exit 1; }
log "base image, VM images (kernels 6.1 and 6.12) and runtime bundle (parallel)"
run_bg base images/build-base.sh
run_bg vm-6.1 "$python" -m mur vm image --kernel 6.1
run_bg vm-6.12 "$python" -m mur vm image --kernel 6.12
run_bg bundle env HOME="$cache/bundle-home" "$python" -c \
  "from mur.runtime.bundle import ensure_local_bundle; print(ensure_local_bundle().path)"

rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    log "${names[$i]} ready"
  else
    rc=1
    log "${names[$i]} FAILED; last lines of $cache/prereqs-${names[$i]}.log:"
    tail -40 "$cache/prereqs-${names[$i]}.log" >&2
  fi
done
exit "$rc"
