"""The kernel probe's on-disk cache: one measurement per boot, kernel, uid and process context.

Measuring forks children that apply Landlock and seccomp, builds namespaces and creates a cgroup:
tens of milliseconds on every `mur run`. Its answer holds as long as nothing it depends on changed,
so it is stored in `<cache root>/probe/host-<uid>-<build>.json` with the key it was measured under, and a
later process reads it back when its own key is the same.

The key is everything the answer depends on that a process can read cheaply:
* the boot id and kernel release (Landlock ABI, seccomp, cgroup mode, systemd: fixed per boot);
* the effective uid (root gets other namespaces and a session uid);
* the namespaces the process is in (user, mount, cgroup, pid: a container on the same kernel shares
  the boot id, not these) and its seccomp state (a filter inherited from a parent);
* the cgroup it runs in (/proc/self/cgroup): delegation and the enclosing bound depend on it, and a
  user who moves to another cgroup (a new login session, a systemd scope) is measured again; and
  the limits, owners and modes on that cgroup's path (cgroup_stamp): a container whose memory
  limit was raised or set (the fix E-RUN-012 asks for) or a cgroup delegated in place is measured
  again at the next run, without `mur probe --refresh`;
* the knobs that decide whether unprivileged user namespaces may be made (they change at run time);
* what the session disk needs besides the kernel: mkfs.ext4 on the PATH mur searches, and
  /dev/loop-control (e2fsprogs installed, or the loop module loaded, after the probe ran);
* the interpreter (which libseccomp binding loads) and the mur version, the cache schema, and the
  size and mtime of the modules that measure (so an edited probe does not read an old answer).

What the key cannot see is left to the places that enforce: libseccomp installed into the same
interpreter mid-boot is picked up by `mur probe --refresh` (or MUR_PROBE_CACHE=off); the session
creates its own cgroup and reads the enclosing bound again when it starts, so a stale cgroup answer
could only change an early check's wording, never what a session is held to.

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
KEEP = 8  # answers kept (one per uid and build); the oldest go


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


STAMP_FILES = ("memory.max", "memory.limit_in_bytes", "pids.max")
MOUNTINFO_LIMIT = 1 << 20


def _owner(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mode, st.st_uid, st.st_gid]


def cgroup_stamp() -> list[list[Any]]:
    """The limits, owners and modes on the path from this process's cgroup up to each cgroup mount's
    root, and the mounts' read-only flags: what delegation and the enclosing bound (enclosing.py, whose
    parsing this follows; kept here because this runs on every start, before anything heavy loads)
    depend on besides the cgroup's path. Tens of small reads."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mountinfo = fh.read(MOUNTINFO_LIMIT)
    except OSError:
        return []
    own: dict[str, str] = {}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                own[name] = parts[2].strip() or "/"
    out: list[list[Any]] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, mountpoint = fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")
        readonly = "ro" in fields[5].split(",") or "ro" in tail[2].split(",")
        keys = [""] if tail[0] == "cgroup2" else [c for c in ("memory", "pids") if c in tail[2].split(",")]
        for key in keys:
            path = own.get(key)
            base = root.rstrip("/")
            if path is None or (base and path != base and not path.startswith(base + "/")):
                continue
            d = os.path.join(mountpoint, path[len(base):].lstrip("/")).rstrip("/") or mountpoint
            while True:
                limits = [_read(os.path.join(d, name)) for name in STAMP_FILES]
                out.append([d, readonly, _owner(d), _owner(os.path.join(d, "cgroup.procs")), limits])
                if len(d) <= len(mountpoint.rstrip("/")) or d == mountpoint:
                    break
                d = os.path.dirname(d)
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
        "cgroup": _read("/proc/self/cgroup"), "cgroup_path": cgroup_stamp(),
        "userns_knobs": [_read(p) for p in USERNS_KNOBS],
        "disk_tools": [_mkfs(), os.path.exists(LOOP_CONTROL)],
        "python": sys.executable, "code": _code_stamp(),
    }


def file_name(current: dict[str, Any]) -> str:
    """One file per uid and build (interpreter, mur version, measuring code): two installs used in
    turn by one user (the CLI of a venv, a deployed service's runtime bundle) keep an answer each,
    instead of each measuring again whenever the other ran. The rest of the key is checked inside."""
    try:
        from _sha256 import sha256  # CPython's own: no OpenSSL loaded for a file name
    except ImportError:  # pragma: no cover - a build without it
        from hashlib import sha256
    build = json.dumps([current["schema"], current["python"], current["mur"], current["code"]]).encode()
    return f"host-{current['uid']}-{sha256(build).hexdigest()[:12]}.json"


def load(current: dict[str, Any]) -> dict[str, Any] | None:
    """The cached probe fields measured under `current`, or None (absent, other key, untrusted, bad)."""
    raw = privatecache.read(DIR_NAME, file_name(current), READ_LIMIT)
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
    return privatecache.write(DIR_NAME, file_name(current), data, keep=KEEP)
