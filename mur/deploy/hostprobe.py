"""What this host can enforce, as one JSON-able dict: what `mur probe --json` prints on a target.

The containment fields come from the sandbox's own probe (`mur.sandbox.probe.probe_host`: a real
Landlock ruleset and seccomp filter applied in a forked child, a real cgroup created and removed);
deploy adds the facts its preflight needs besides: the runtime's version, kernel, uid, home, and
where libseccomp was found.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import os
import platform
import pwd
from pathlib import Path
from typing import Any

from mur import __version__

LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib")


def libseccomp_path() -> str | None:
    """Where libseccomp is found (the sandbox loads it with ctypes through the ld cache)."""
    found = ctypes.util.find_library("seccomp")
    if found:
        return found
    for d in LIB_DIRS:
        p = Path(d) / "libseccomp.so.2"
        if p.exists():
            return str(p)
    return None


def probe_report() -> dict[str, Any]:
    """The full report printed by `mur probe --json`."""
    from mur.sandbox.probe import probe_host

    report = dataclasses.asdict(probe_host())
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    report.update({
        "source": "mur.sandbox.probe",
        "mur_version": __version__,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "uid": uid,
        "user": user,
        "home": os.environ.get("HOME", ""),
        "libseccomp": libseccomp_path(),
    })
    return report
