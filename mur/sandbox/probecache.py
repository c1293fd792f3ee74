"""The kernel probe's on-disk cache: one measurement per boot, kernel, uid and process context.

Measuring forks children that apply Landlock and seccomp, builds namespaces and creates a cgroup:
tens of milliseconds on every `mur run`. Its answer holds as long as nothing it depends on changed,
so it is stored in `<cache root>/probe/host-<uid>.json` with the key it was measured under, and a
later process reads it back when its own key is the same.

The key is everything the answer depends on that a process can read cheaply:
* the boot id and kernel release (Landlock ABI, seccomp, cgroup mode, systemd: fixed per boot);
* the effective uid (root gets other namespaces and a session uid);
* the namespaces the process is in (user, mount, cgroup, pid: a container on the same kernel shares
  the boot id, not these) and its seccomp state (a filter inherited from a parent);
* the cgroup it runs in (/proc/self/cgroup): delegation and the enclosing bound depend on it, and a
  user who moves to another cgroup (a new login session, a systemd scope) is measured again;
* the knobs that decide whether unprivileged user namespaces may be made (they change at run time);
* what the session disk needs besides the kernel: mkfs.ext4 on the PATH mur searches, and
  /dev/loop-control (e2fsprogs installed, or the loop module loaded, after the probe ran);
* the interpreter (which libseccomp binding loads) and the mur version, the cache schema, and the
  size and mtime of the modules that measure (so an edited probe does not read an old answer).

What the key cannot see is left to the places that enforce: a cgroup whose permissions changed in
place, libseccomp installed into the same interpreter mid-boot, or the enclosing cgroup's limits
raised are picked up by `mur probe --refresh` (or MUR_PROBE_CACHE=off); the session creates its own
cgroup and reads the enclosing bound again when it starts, so a stale cgroup answer changes only
an early check's wording, never what a session is held to.

The runtime may be root, so the file is read and written through mur.privatecache: trusted only
when nobody else could have written it, written atomically into a 0700 directory.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mur import privatecache

SCHEMA = 2  # 2: sealed and the session disk (probeview)
ENV = "MUR_PROBE_CACHE"  # "off" (or "0"): neither read nor write the cache
BOOT_ID = "/proc/sys/kernel/random/boot_id"
NAMESPACES = ("user", "mnt", "cgroup", "pid")
USERNS_KNOBS = ("/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
MEASURING = ("probe.py", "probecache.py", "landlock.py", "seccomp.py", "policy.py", "cgroups.py",
             "namespaces.py", "enclosing.py", "probeview.py", "rootfs.py", "disk.py", "viewplan.py", "diskplan.py")
LOOP_CONTROL = "/dev/loop-control"
MKFS_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"  # diskplan.MKFS_PATH (not imported: reading the cache loads no planner)
READ_LIMIT = 64 * 1024
DIR_NAME = "probe"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no", "false")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(READ_LIMIT).strip()
    except OSError:
        return None


def _seccomp_state() -> list[str]:
    text = _read("/proc/self/status") or ""
    return [line for line in text.splitlines() if line.startswith(("Seccomp:", "Seccomp_filters:", "NoNewPrivs:"))]


def _mkfs() -> str | None:
    import shutil

    return shutil.which("mkfs.ext4", path=MKFS_PATH)


def _code_stamp() -> list[list[Any]]:
    here = Path(__file__).parent
    out: list[list[Any]] = []
    for name in MEASURING:
        try:
            st = os.stat(here / name)
        except OSError:
            out.append([name, None])
            continue
        out.append([name, st.st_size, st.st_mtime_ns])
    return out


def key() -> dict[str, Any] | None:
    """What the probe's answer depends on, as read now; None where there is no boot id (not Linux)."""
    boot = _read(BOOT_ID)
    if not boot:
        return None
    from mur import __version__

    namespaces = {}
    for ns in NAMESPACES:
        try:
            namespaces[ns] = os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            namespaces[ns] = None
    return {
        "schema": SCHEMA, "mur": __version__, "boot_id": boot, "kernel": os.uname().release,
        "uid": os.geteuid(), "namespaces": namespaces, "seccomp": _seccomp_state(),
        "cgroup": _read("/proc/self/cgroup"), "userns_knobs": [_read(p) for p in USERNS_KNOBS],
        "disk_tools": [_mkfs(), os.path.exists(LOOP_CONTROL)],
        "python": sys.executable, "code": _code_stamp(),
    }


def file_name(uid: int) -> str:
    return f"host-{uid}.json"


def load(current: dict[str, Any]) -> dict[str, Any] | None:
    """The cached probe fields measured under `current`, or None (absent, other key, untrusted, bad)."""
    raw = privatecache.read(DIR_NAME, file_name(current["uid"]), READ_LIMIT)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("key") != current or not isinstance(data.get("probe"), dict):
        return None
    return data["probe"]


def store(current: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Write the fields under `current`; False (and nothing written) where the directory is not ours."""
    data = json.dumps({"key": current, "probe": fields}, sort_keys=True).encode("utf-8")
    return privatecache.write(DIR_NAME, file_name(current["uid"]), data)
