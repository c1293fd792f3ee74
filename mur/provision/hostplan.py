"""What `mur host prepare` would change on a host, as data: host state in, a list of changes out.

Pure: the state is read on the host first (``state_command`` runs there, ``parse_state`` reads
its output) and the kernel-level decisions come from deploy/host/mur-host.sh's own `plan` (the
script cloud-init runs, run here on the facts), so a host prepared either way ends up the same.
An empty plan is the idempotence check: a second run changes nothing.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import asdict, dataclass, field

from mur.errors import MurError
from mur.provision import assets
from mur.provision.userdata import UserDataInputs, marker

_SECTION = "@@mur-section@@"


@dataclass(frozen=True)
class Change:
    id: str  # packages, group, user, user-group, keys, file:<dest>, marker, kernel-<k>, cmdline, reboot
    what: str
    reboot: bool = False


@dataclass
class HostState:
    facts: dict[str, str]
    group: bool = False
    user: bool = False
    in_group: bool = False
    home: str = ""
    keys: tuple[str, ...] = ()
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # dest -> (sha256, "mode owner:group")
    marker: str = ""


@dataclass
class Plan:
    changes: list[Change]
    refused: str | None = None

    @property
    def reboot(self) -> bool:
        return any(c.reboot for c in self.changes)

    def to_dict(self) -> dict:
        return {"changes": [asdict(c) for c in self.changes], "refused": self.refused, "reboot": self.reboot}


def state_command(user: str, script: str) -> str:
    """One shell script (run as root) printing every fact the plan needs, in sections."""
    q = shlex.quote
    dests = " ".join(q(f.dest) for f in assets.HOST_FILES)
    return "\n".join([
        f"sh -s -- facts <<'MUR_HOST_SH'\n{script}\nMUR_HOST_SH",
        f"echo {_SECTION}",
        f"getent group {assets.GROUP} >/dev/null && echo group=yes || echo group=no",
        f"if id -u {q(user)} >/dev/null 2>&1; then echo user=yes; else echo user=no; fi",
        f"id -nG {q(user)} 2>/dev/null | tr ' ' '\\n' | grep -qx {assets.GROUP} && echo in_group=yes || echo in_group=no",
        f"echo home=$(getent passwd {q(user)} | cut -d: -f6)",
        f"echo {_SECTION}",
        f"h=$(getent passwd {q(user)} | cut -d: -f6); [ -n \"$h\" ] && cat \"$h/.ssh/authorized_keys\" 2>/dev/null; true",
        f"echo {_SECTION}",
        f"for f in {dests}; do [ -f \"$f\" ] && echo \"$(sha256sum < \"$f\" | cut -c1-64) $(stat -c '%a %U:%G' \"$f\") $f\"; done; true",
        f"echo {_SECTION}",
        f"cat {q(assets.MARKER)} 2>/dev/null; true",
    ])


def parse_kv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def parse_state(text: str) -> HostState:
    parts = text.split(_SECTION + "\n")
    if len(parts) != 5:
        raise MurError("E-PROV-002", f"could not read the host's state (got {len(parts)} of 5 sections): {text[-300:]!r}")
    facts, ids, keys, files, mark = parts
    idv = parse_kv(ids)
    found: dict[str, tuple[str, str]] = {}
    for line in files.splitlines():
        bits = line.split(" ", 3)
        if len(bits) == 4:
            found[bits[3]] = (bits[0], f"{bits[1]} {bits[2]}")
    return HostState(
        facts=parse_kv(facts), group=idv.get("group") == "yes", user=idv.get("user") == "yes",
        in_group=idv.get("in_group") == "yes", home=idv.get("home", ""),
        keys=tuple(k.strip() for k in keys.splitlines() if k.strip() and not k.startswith("#")),
        files=found, marker=mark)


def kernel_lines(facts: dict[str, str], kernel: str) -> list[str]:
    """deploy/host/mur-host.sh plan on these facts: the same decisions cloud-init's run makes."""
    text = "".join(f"{k}={v}\n" for k, v in facts.items())
    try:
        proc = subprocess.run(["sh", str(assets.path("host/mur-host.sh")), "plan", "--kernel", kernel], input=text,
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise MurError("E-PROV-002", f"cannot run the host plan script: {exc}") from exc
    if proc.returncode != 0:
        raise MurError("E-PROV-002", f"mur-host.sh plan failed: {proc.stderr.strip()[-500:]}")
    return [ln for ln in proc.stdout.splitlines() if ln.strip()]


def _mode_owner(f: assets.HostFile) -> str:
    return f"{f.mode:o} root:root"


def plan(state: HostState, inp: UserDataInputs) -> Plan:
    """The changes that bring this host to the prepared state, in the order they apply."""
    lines = kernel_lines(state.facts, inp.kernel)
    for ln in lines:
        kind, _, what = ln.split("|", 2) if ln.count("|") >= 2 else (ln, "", ln)
        if kind == "refuse":
            return Plan([], refused=what)
    changes: list[Change] = []
    late: list[Change] = []
    for ln in lines:
        cid, reboot, what = ln.split("|", 2)
        (changes if cid == "packages" else late).append(Change(cid, what, reboot == "yes"))
    user = inp.deploy_user
    if not state.group:
        changes.append(Change("group", f"create group {assets.GROUP} (its members get the sudoers rule)"))
    if not state.user:
        changes.append(Change("user", f"create user {user} (no password, SSH keys only) in group {assets.GROUP}"))
    elif not state.in_group:
        changes.append(Change("user-group", f"add {user} to group {assets.GROUP}"))
    missing = [k for k in inp.ssh_authorized_keys if _key_body(k) not in {_key_body(x) for x in state.keys}]
    if missing:
        changes.append(Change("keys", f"authorize {len(missing)} SSH key(s) for {user}"))
    seen: set[str] = set()
    for f in assets.HOST_FILES:
        if f.dest in seen:
            continue
        seen.add(f.dest)
        have = state.files.get(f.dest)
        if have is None:
            changes.append(Change(f"file:{f.dest}", f"install {f.dest} (deploy/{f.asset})"))
        elif have != (f.sha256(), _mode_owner(f)):
            changes.append(Change(f"file:{f.dest}", f"update {f.dest} (deploy/{f.asset})"))
    if state.marker != marker(inp):
        changes.append(Change("marker", f"record {assets.MARKER} (prepared for mur {inp.mur_version}, kernel {inp.kernel})"))
    return Plan(changes + late)


def _key_body(line: str) -> str:
    """The type and base64 of an authorized_keys line (options and comments aside)."""
    parts = line.split()
    for i, p in enumerate(parts[:-1]):
        if p.startswith(("ssh-", "ecdsa-", "sk-")):
            return f"{p} {parts[i + 1]}"
    return line.strip()
