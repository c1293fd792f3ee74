#!/usr/bin/env bash
# The fast suite (tests/, through the README's `scripts/test`) in a clean Debian 12 container: Debian's
# own python3 (3.11.2), git and CA certificates, root without extra rights (Docker's default capabilities
# and seccomp profile, no cgroup delegation), no binutils, no network. Tests that need what such a machine
# lacks must skip with their reason; anything else failing here fails CI.
#
#   .ci/clean-container.sh [pytest args...]     # default: tests
#
# Fast because nothing is downloaded per run: the image (mur-base:bookworm + python3, git, ca-certificates,
# and the python3-venv and libpython3.11 that scripts/bootstrap installs as root; the container has no
# network to do it) is built once per content of this script, and the Python packages come from a
# wheelhouse in $MUR_CI_CACHE keyed by this checkout's pinned set (the host .venv's `pip freeze`).
# The checkout goes in as a tar of its tracked and untracked-but-not-ignored files (no bind mount: nothing
# the container writes lands in the checkout). With no arguments it runs `scripts/test tests -rs`, then
# builds the runtime bundle there (PyInstaller, with no objdump/objcopy on the machine) and runs it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${MUR_CI_CACHE:-/var/cache/mur-ci}"
base="${MUR_BASE_IMAGE:-mur-base:bookworm}"
log() { printf '== clean-container: %s (%ss)\n' "$*" "$SECONDS" >&2; }

key="$( { cat "${BASH_SOURCE[0]}"; docker image inspect -f '{{.Id}}' "$base"; } | sha256sum | cut -c1-12)"
image="mur-clean:$key"
if ! docker image inspect "$image" >/dev/null 2>&1; then
  log "building $image from $base (python3 python3-venv libpython3.11 git ca-certificates)"
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' EXIT
  mkdir "$ctx/ca"
  # This machine's extra CA certificates: its HTTPS egress may go through a proxy (apt here; pip in
  # the container never goes online).
  cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
  cat > "$ctx/Dockerfile" <<EOF
FROM $base
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3 python3-venv libpython3.11 git ca-certificates \\
 && update-ca-certificates && rm -rf /var/lib/apt/lists/* \\
 && ! command -v objdump && ! command -v objcopy && ! command -v gcc
LABEL org.opencontainers.image.title="mur clean Debian 12 test image"
EOF
  docker build --network host -q -t "$image" "$ctx" >/dev/null
  rm -rf "$ctx"
  trap - EXIT
  # Older clean images (an edit of this script or a new base) are left behind: remove them.
  docker image ls --format '{{.Repository}}:{{.Tag}}' mur-clean | grep -vx "$image" | xargs -r docker rmi -f >/dev/null || true
fi

# The wheelhouse: exactly what the host .venv holds (scripts/bootstrap made it), downloaded once.
[[ -x .venv/bin/python ]] || scripts/bootstrap
pins="$(.venv/bin/python -m pip freeze --all --exclude-editable --disable-pip-version-check | sort)"
wkey="$(printf '%s\n' "$pins" | sha256sum | cut -c1-12)"
wheels="$cache/wheelhouse/$wkey"
if [[ ! -f "$wheels/.complete" ]]; then
  log "wheelhouse $wheels (once per dependency set)"
  mkdir -p "$wheels"
  printf '%s\n' "$pins" > "$wheels/requirements.txt"
  # `pip wheel`, not `download`: a few pins are sdists only (cgroupspy); they are built here, once.
  .venv/bin/python -m pip wheel --disable-pip-version-check -q --no-deps \
    -w "$wheels" -r "$wheels/requirements.txt" >&2
  touch "$wheels/.complete"
  find "$cache/wheelhouse" -mindepth 1 -maxdepth 1 -type d ! -name "$wkey" -exec rm -rf {} + 2>/dev/null || true
fi

bundle=""
if [[ $# -eq 0 ]]; then
  set -- tests -rs
  bundle=1  # the default run also builds the runtime bundle there: PyInstaller without binutils
fi
log "scripts/test $* in $image (Debian's python3, no network, no extra rights)${bundle:+, then the runtime bundle}"
name="mur-clean-$$-$RANDOM"
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 143' TERM INT  # .ci/run stops this job when its own run fails: the container goes too
# The container's steps: unpack the checkout, then the README's command with pip pointed at the wheelhouse,
# then (default run) build the runtime bundle with no objdump/objcopy on the machine and run it.
inner='set -e; mkdir -p /work/mur && cd /work/mur && tar -x && python3 --version >&2
scripts/test "$@"
if [ -n "$MUR_CLEAN_BUNDLE" ]; then
  echo "== clean-container: the runtime bundle (PyInstaller; no binutils here)" >&2
  ! command -v objdump >/dev/null
  .venv/bin/python -c "from mur.runtime.bundle import ensure_local_bundle as b; print(b(lambda m: None).path)" > /tmp/bundle
  MUR_RUNTIME_DIR=/tmp/rt "$(cat /tmp/bundle)" --version
  MUR_RUNTIME_DIR=/tmp/rt "$(cat /tmp/bundle)" probe --json >/dev/null
fi'
git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - \
  | docker run -i --name "$name" --network none \
      -v "$wheels:/wheelhouse:ro" -e PIP_NO_INDEX=1 -e PIP_FIND_LINKS=/wheelhouse \
      -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e MUR_CLEAN_BUNDLE="$bundle" \
      "$image" bash -c "$inner" clean-container "$@" &
wait $!  # (in the background so a TERM is handled at once, not after the container ends)
