"""Preflight: what a target can do, measured on the target before anything is changed.

The only write is the verified runtime into the target's runtime cache (`~/.murmur/bin/`), because
the kernel checks are a real probe run *by that runtime* (`mur probe --json`): Landlock ABI,
seccomp, cgroup mode and delegation, systemd. Then the pinned version is checked, disk space,
sudo, whether shell tools will get a cgroup, what brings the service back after a reboot, and the
achievable containment class against the capsule's floor (E-CAP-003 when unmet, E-DEPLOY-007 for
anything else fatal).

h15's host provisioning runs the same checks: `preflight_host(target, runtime, capsule, dep_id=...)`.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from mur.runtime.bundle import Bundle
from mur.resolve.shipped import ShippedCapsule
from mur.deploy.steps import Layout, Mkdir, Upload
from mur.deploy.targets.base import DISK_FULL_TEXT, HELPER, Target
from mur.errors import MurError
from mur.platform import platform_tag

MARGIN = 64 << 20


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fatal: bool = True


@dataclass
class Report:
    target: str
    provider: str
    facts: dict[str, Any] = field(default_factory=dict)
    containment: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok or not c.fatal for c in self.checks)

    def add(self, name: str, ok: bool, detail: str, fatal: bool = True) -> Check:
        check = Check(name, ok, detail, fatal)
        self.checks.append(check)
        return check

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "provider": self.provider, "ok": self.ok, **self.facts,
                "containment": self.containment, "checks": [asdict(c) for c in self.checks], "probe": self.probe}

    def render(self) -> str:
        lines = [f"preflight {self.target} ({self.provider}): {'ok' if self.ok else 'FAILED'}"]
        width = max((len(c.name) for c in self.checks), default=8)
        for c in self.checks:
            mark = "✓" if c.ok else ("✗" if c.fatal else "!")
            lines.append(f"  {mark} {c.name.ljust(width)}  {c.detail}")
        return "\n".join(lines) + "\n"

    def raise_if_failed(self) -> None:
        """E-CAP-003 when only the containment floor fails, else E-DEPLOY-007 listing the failures."""
        failed = [c for c in self.checks if c.fatal and not c.ok]
        if not failed:
            return
        if len(failed) == 1 and failed[0].name == "disk":
            raise MurError("E-DEPLOY-014", f"preflight failed on {self.target}: {failed[0].detail}",
                           "free space on that filesystem (or give the deploy user a larger home), then deploy "
                           "again; `mur deploy gc` removes what interrupted deploys left")
        if len(failed) == 1 and failed[0].name == "containment":
            c = self.containment
            raise MurError(
                "E-CAP-003",
                f"declared containment class '{c['declared']}' is not achievable on {self.target} "
                f"(achieved: '{c['achieved']}'): {c['reason']}",
                f"lower the declared floor to '{c['achieved']}' (capabilities.containment in murmur.yaml, containment in "
                f".murmur/config.yaml, or --containment), or deploy to a host that provides '{c['declared']}'",
            )
        detail = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        raise MurError("E-DEPLOY-007", f"preflight failed on {self.target}: {detail}",
                       "run `mur deploy --check` for the full report")


def parse_probe(text: str) -> dict[str, Any]:
    """The last JSON object line of `mur probe --json` output."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    raise MurError("E-DEPLOY-007", f"the runtime's probe printed no JSON: {text[-400:]!r}")


def parse_version(text: str) -> str:
    """`mur 0.1.0` -> `0.1.0`."""
    parts = text.strip().split()
    return parts[-1] if parts else ""


def parse_df(text: str) -> int | None:
    """Available bytes from `df -Pk PATH` output."""
    room = parse_df_full(text)
    return room[2] if room else None


def parse_df_full(text: str) -> tuple[str, str, int] | None:
    """(filesystem, mount point, available bytes) from `df -Pk PATH` output."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    cols = lines[-1].split()
    try:
        return cols[0], cols[5], int(cols[3]) * 1024
    except (IndexError, ValueError):
        return None


def probe_command(runtime: str, sha256: str, uid: int) -> str:
    """Run `mur probe --json` with the runtime, cached per runtime digest, boot and uid.

    A runtime start costs seconds on an emulated VM; the kernel facts it reports do not change
    within one boot, so an unchanged redeploy reads the cached report instead.
    """
    q = shlex.quote
    cache = f"$HOME/.murmur/bin/.probe/{sha256[:16]}-$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)-{uid}.json"
    return (f"f=\"{cache}\"; if [ -s \"$f\" ]; then cat \"$f\"; else "
            f"out=\"$({q(runtime)} probe --json)\" || {{ rc=$?; printf '%s\\n' \"$out\"; exit $rc; }}; "
            f"mkdir -p \"$HOME/.murmur/bin/.probe\" && printf '%s\\n' \"$out\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; "
            f"printf '%s\\n' \"$out\"; fi")


def containment_check(report: Report, inp: ShippedCapsule, probe: dict[str, Any]) -> None:
    """Compare the floor with what the probe achieved (shared by host and Docker preflight).

    The probe runs as the user the service runs as, so its `netns` says whether the capsule's shell
    tools would get the private network namespace that carries network.allow under `scoped`: a
    target that cannot make one is refused here, not at the first session (a probe from a runtime
    that does not report `netns` counts as able, as the sandbox's own check does)."""
    from mur.manifest.containment import achieved_class, network_shortfall, shortfall_reason

    class _P:
        achieved = str(probe.get("achieved") or "advisory")
        mechanism = str(probe.get("mechanism") or "none")
        tier = str(probe.get("tier") or "")
        netns = bool(probe.get("netns", True))

    caps = inp.capsule.capabilities
    workdir_exec = bool(caps.filesystem.workdir_exec)
    net_short = network_shortfall(caps, _P)
    achieved = achieved_class(_P, workdir_exec, net_short)
    reason = shortfall_reason(inp.floor, achieved, workdir_exec, net_short)
    report.containment = {"declared": inp.floor, "source": inp.floor_source, "achieved": achieved,
                          "met": reason is None, "reason": reason or probe.get("reason"),
                          "mechanism": probe.get("mechanism"), "netns": probe.get("netns"),
                          "network_shortfall": net_short}
    report.add("containment", reason is None,
               f"floor {inp.floor} ({inp.floor_source}), achieved {achieved} via {probe.get('mechanism')}"
               + (f": {reason}" if reason else ""))


def sudo_mode(target: Target) -> str:
    """How deploy gets root on the target: "root", "helper" (a prepared host's root helper, preferred
    over sudo when both work: it is all deploy needs), "nopasswd" (sudo -n sh -c) or "none"."""
    if target.is_root:
        return "root"
    if target.run(f"sudo -n {HELPER} check", check=False, what="root helper check").rc == 0:
        return "helper"
    return "nopasswd" if target.can_elevate_shell() else "none"


def choose_init(pref: str, systemd: bool, privileged: bool) -> str:
    """systemd when it runs and we may use it; else the mur supervisor."""
    if pref == "systemd":
        return "systemd"
    if pref == "supervisor":
        return "supervisor"
    return "systemd" if systemd and privileged else "supervisor"


CRON_COMMAND = ("command -v crontab >/dev/null 2>&1 || exit 1; for f in /proc/[0-9]*/comm; do "
                "read -r c < \"$f\" 2>/dev/null || continue; case \"$c\" in cron|crond) exit 0;; esac; done; exit 1")


def boot_check(report: Report, target: Target, init: str, no_boot_hook: bool) -> None:
    """What brings the service back after a reboot: the enabled unit, a cron @reboot entry, or
    nothing, which deploy accepts only when asked to (--no-boot-hook)."""
    if init == "systemd":
        boot, detail = "systemd", "the unit is enabled (WantedBy=multi-user.target)"
    elif no_boot_hook:
        boot, detail = "none", "no boot hook (--no-boot-hook): the service does not come back after a reboot"
    elif target.run(CRON_COMMAND, check=False, what="find cron").rc == 0:
        boot, detail = "cron", "a @reboot entry in the deploy user's crontab starts the supervisor"
    else:
        report.facts["boot"] = "none"
        report.add("boot", False, "no systemd and no running cron daemon: the service would not come back after a "
                   "reboot (pass --no-boot-hook to accept that)")
        return
    report.facts["boot"] = boot
    report.add("boot", True, detail, fatal=False)


def preflight_host(target: Target, bundle: Bundle, inp: ShippedCapsule, *, dep_id: str, init_pref: str = "auto",
                   no_boot_hook: bool = False, progress: Callable[[str], None] | None = None,
                   scratch: str | None = None) -> Report:
    """Probe an SSH or local target; uploads (only) the verified runtime into its cache (through
    `scratch`, the deploy's staging directory, when given)."""
    from mur.deploy.apply import apply_steps

    report = Report(target.label, target.kind)
    q = shlex.quote
    home, user, uid = target.home, target.user, target.uid
    system, machine = target.uname()
    plat = platform_tag(system, machine)
    report.facts.update({"user": user, "uid": uid, "home": home, "platform": plat})
    report.add("platform", plat == bundle.platform, f"{plat}" + ("" if plat == bundle.platform else
               f" but the runtime is built for {bundle.platform}"))
    if plat != bundle.platform:
        return report

    sudo = sudo_mode(target)
    privileged = sudo in ("root", "nopasswd", "helper")
    report.facts["sudo"] = sudo
    report.add("privileges", True, {
        "root": "deploying as root", "nopasswd": f"{user} has passwordless sudo",
        "helper": f"{user} may run only {HELPER} as root (a prepared host): systemd units that run as {user}",
        "none": f"{user} has no passwordless sudo: no systemd unit, no service cgroup"}[sudo], fatal=False)

    systemd = target.run("test -d /run/systemd/system && command -v systemctl >/dev/null", check=False,
                         what="find systemd").rc == 0
    init = choose_init(init_pref, systemd, privileged)
    if sudo == "helper" and init == "supervisor":
        # the helper manages systemd units only: the supervisor gets root (its service cgroup) only
        # where sudo also allows a shell, else it runs as the user
        sudo = "nopasswd" if target.can_elevate_shell() else "none"
        privileged = sudo == "nopasswd"
        report.facts["sudo"] = sudo
    report.facts.update({"systemd": systemd, "init": init})
    if init == "systemd":
        report.add("init", systemd and privileged, "systemd unit with Delegate=" if systemd and privileged else
                   ("systemd is not running on the target" if not systemd else "installing a unit needs root or sudo"))
    else:
        report.add("init", True, "mur supervisor (no systemd)" if not systemd else "mur supervisor (by request)")
    boot_check(report, target, init, no_boot_hook)

    lay = Layout(home, dep_id)
    remote_bundle = lay.bundle(bundle.name)
    need = MARGIN + inp.upload_bytes
    have_bundle = target.digests([remote_bundle]).get(remote_bundle) == bundle.sha256
    # the runtime file, plus its one-time unpacking into ~/.murmur/runtime (~2.5x the file)
    need_home = need + (0 if have_bundle else bundle.size) + (bundle.size * 3 if bundle.origin != "installed" else 0)
    # where deploy writes: ~/.murmur, or the nearest existing directory above it (it may be a
    # filesystem of its own)
    room = parse_df_full(target.run(f"p={q(home + '/.murmur')}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do "
                                    "p=$(dirname \"$p\"); done; df -Pk \"$p\"", check=False, what="disk space").stdout)
    df_home = room[2] if room else None
    report.facts.update({"disk_free_bytes": df_home, "disk_needed_bytes": need_home,
                         "disk_filesystem": room[0] if room else None, "disk_mount": room[1] if room else None})
    where = f"{room[0]} (mounted on {room[1]}, holding {home}/.murmur)" if room else home
    report.add("disk", df_home is None or df_home >= need_home,
               f"{_mb(df_home)} free on {where}, {_mb(need_home)} needed ({need_home} bytes)")
    if df_home is not None and df_home < need_home:
        return report

    if progress and not have_bundle:
        progress(f"upload runtime {bundle.name} ({_mb(bundle.size)})")
    dirs = [Mkdir(lay.bin_dir, 0o755)] + ([Mkdir(lay.staging, 0o700), Mkdir(scratch, 0o700)] if scratch else [])
    apply_steps(target, [*dirs, Upload(str(bundle.path), remote_bundle, 0o755, bundle.sha256, bundle.size,
                                       scratch=scratch)])
    res = target.run(probe_command(remote_bundle, bundle.sha256, uid), check=False, timeout=600, what="probe")
    if res.rc != 0 and any(t in res.stderr + res.stdout for t in DISK_FULL_TEXT):
        # the runtime unpacks itself at its first run (about 2.5 times its size)
        raise target.disk_full("unpack the runtime", need=bundle.size * 3)
    try:
        probe = parse_probe(res.stdout) if res.rc == 0 else {}
    except MurError:
        probe = {}
    got = str(probe.get("mur_version") or "")
    report.facts["runtime"] = {"path": remote_bundle, "version": got, "pinned": bundle.version, "sha256": bundle.sha256}
    report.add("runtime", bool(probe) and got == bundle.version,
               f"{bundle.name} reports mur {got}; pinned {bundle.version}" if probe else
               f"{bundle.name} does not run on the target (exit {res.rc}): {(res.stderr or res.stdout).strip()[-300:]}")
    if not probe:
        return report
    report.probe = probe
    report.facts.update({k: probe.get(k) for k in ("landlock_abi", "seccomp", "cgroup_mode", "kernel")})
    report.add("landlock", True, f"ABI {probe.get('landlock_abi')} (kernel {probe.get('kernel')})", fatal=False)
    report.add("seccomp", True, "available" if probe.get("seccomp") else
               "unavailable (is libseccomp2 installed?)", fatal=False)
    _cgroup_checks(report, inp, probe, init, uid == 0, privileged)
    containment_check(report, inp, probe)
    return report


def _cgroup_checks(report: Report, inp: ShippedCapsule, probe: dict[str, Any], init: str, root: bool,
                   privileged: bool) -> None:
    mode = str(probe.get("cgroup_mode") or "none")
    if init == "systemd":
        service = mode != "none"
        how = "the unit's cgroup, delegated with Delegate=memory pids cpu io"
    else:
        service = mode != "none" and (privileged or bool(probe.get("cgroup_delegated")))
        how = "a subtree owned by the mur supervisor" if service else "none (stop falls back to the process group)"
    # Shell tools need a cgroup the runtime (running as the deploy user) can manage.
    if root:
        sessions = bool(probe.get("cgroup_delegated"))
    elif mode == "unified":
        sessions = (init == "systemd" or privileged) or bool(probe.get("cgroup_delegated"))
    else:
        sessions = False
    report.facts.update({"cgroup_mode": mode, "cgroup_service": how, "cgroup_sessions": sessions})
    report.add("cgroup", service or not inp.needs_subprocess, f"{mode}; service cgroup: {how}", fatal=inp.needs_subprocess)
    why = "" if sessions else (" (cgroup v1 can only be managed as root)" if mode in ("hybrid", "legacy") and not root
                               else " (no delegable cgroup)")
    report.add("shell limits", sessions or not inp.needs_subprocess,
               ("shell tools get aggregate cgroup limits" if sessions else "shell tools cannot get aggregate limits" + why)
               + ("" if inp.needs_subprocess else "; the capsule has no shell/spawn grants"),
               fatal=inp.needs_subprocess)


def _mb(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 20):.0f} MiB"
