#!/usr/bin/env bash
# Build the local base image mur-base:bookworm from debootstrap (no image registry is reachable).
#
#   images/build-base.sh            # no-op when the image already exists
#   FORCE=1 images/build-base.sh    # rebuild
#
# The rootfs tarball is cached in $MUR_CI_CACHE (default /var/cache/mur-ci), keyed by this script's
# content, so a rebuild after `docker system prune` takes seconds, not a debootstrap.
# Packages: libseccomp2 (the sandbox's seccomp filters, loaded by the mur bundle through ctypes) and
# ca-certificates (HTTPS inference endpoints). Nothing else: the mur bundle brings its own Python.
set -euo pipefail

image="${MUR_BASE_IMAGE:-mur-base:bookworm}"
cache="${MUR_CI_CACHE:-/var/cache/mur-ci}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
include="libseccomp2,ca-certificates"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-base: $image already present" >&2
  exit 0
fi

key="$(cat "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
tarball="$cache/mur-base-bookworm-$key.tar"
mkdir -p "$cache"

if [[ ! -s "$tarball" ]]; then
  command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q --no-install-recommends debootstrap; }
  rootfs="$(mktemp -d /tmp/mur-base-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "build-base: debootstrap --variant=minbase bookworm (about 30 s)" >&2
  debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" >&2
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  # A minbase rootfs still has a policy-rc.d-less dpkg: keep daemons from starting in image builds.
  printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d" && chmod 755 "$rootfs/usr/sbin/policy-rc.d"
  tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi

echo "build-base: docker import $tarball -> $image" >&2
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  "$tarball" "$image" >/dev/null
echo "build-base: $image ready" >&2
