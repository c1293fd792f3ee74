"""The seam between plans and machines: a Target runs shell commands, moves files atomically and
opens a machine's loopback port for health checks.

Every target speaks POSIX sh with coreutils (`sha256sum`, `mv`, `ln`): that is all a debootstrap
minbase image has, so nothing else is assumed on the far side. Subclasses implement the primitives
(`_exec`, `_put`, `open_port`); everything else is shared here. Each adapter translates its
transport's errors (paramiko, docker, OSError) into MurError itself, once.

For other code that needs a host (h15's provisioning, tests): `connect(spec)` in
mur.deploy.targets gives a Target; `target.run(cmd)`, `target.put_file(src, dst, mode)`,
`target.home`, `target.uname()` are the whole surface.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from mur.errors import MurError

# The one program the deploy user of a prepared host may run as root (deploy/host/mur-deploy-helper,
# installed by mur.provision; its sudoers rule names nothing else but `true`).
HELPER = "/usr/local/lib/mur/mur-deploy-helper"


DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


def quoted(text: str) -> str:
    """Remote output quoted inside one of our errors: its own `error[CODE]` lines are shown as
    `(remote CODE)`, so the error line of this command is the only `error[...]` a reader (or a
    script) finds."""
    import re

    return re.sub(r"\berror\[([A-Z]+-[A-Z]+-\d+)\]", r"(remote \1)", text)


def full_line(text: str) -> str | None:
    """The line of remote output that says a filesystem is full, if one does."""
    return next((ln.strip() for ln in text.splitlines() if any(t in ln for t in DISK_FULL_TEXT)), None)


class Held:
    """A long-running command on the target, its stdin ours to write and its stdout ours to read
    (the deployment lock's holder, mur.deploy.lock). It ends when we close it or our process dies."""

    def readline(self, timeout: float) -> str | None:
        """The next line (with its newline); "" at the end; None when `timeout` passed first."""
        raise NotImplementedError

    def send(self, data: bytes) -> bool:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Target:
    """A machine reachable by some transport. Subclasses set `kind` and implement the primitives."""

    kind = "base"
    error_code = "E-DEPLOY-003"

    def __init__(self) -> None:
        self._home: str | None = None
        self._uid: int | None = None
        self._user: str | None = None
        # Elevate through HELPER instead of `sudo -n sh -c` (preflight found it; records keep it).
        self.helper = False
        # The step in progress (set by the provider): named by every link or disk error.
        self.doing = ""

    # primitives -----------------------------------------------------------------------------

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        raise NotImplementedError

    def _put(self, src: Path | bytes, dst: str) -> None:
        """Copy to `dst` (a fresh temp path next to the final one), private (0600) from the first byte."""
        raise NotImplementedError

    def hold(self, cmd: str) -> Held:
        """Start `cmd` and keep it running, its stdin and stdout connected to the returned Held."""
        raise NotImplementedError

    def alive(self, timeout: float = 3.0) -> bool:
        """Whether the connection carries commands right now."""
        return True

    def reconnect(self, budget: float | None = None) -> None:
        """Replace a dead connection by a fresh one (a transport without connections: nothing)."""

    def abort(self, why: str = "") -> None:
        """From another thread: end every wait on this connection now (a transport without one: nothing)."""

    def open_port(self, port: int) -> contextlib.AbstractContextManager[tuple[str, int]]:
        """(host, port) on this machine that reaches 127.0.0.1:<port> on the target, while open."""
        raise NotImplementedError

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        """Run `cmd`, feeding its output to `sink` as it comes; returns the exit status."""
        res = self._exec(cmd, None, None)
        sink((res.stdout + res.stderr).encode())
        return res.rc

    def close(self) -> None:
        pass

    @property
    def label(self) -> str:
        return self.kind

    # shared ---------------------------------------------------------------------------------

    def __enter__(self) -> "Target":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _identity(self) -> None:
        res = self.run('printf "%s\\n%s\\n%s\\n" "$(id -u)" "$(id -un)" "$HOME"', check=True, what="identity")
        uid, user, home = (res.stdout.split("\n") + ["", "", ""])[:3]
        self._uid, self._user, self._home = int(uid or -1), user, home
        if not home or not home.startswith("/"):
            raise MurError("E-DEPLOY-007", f"{self.label}: the target user has no usable $HOME ({home!r})",
                           "give the deploy user a home directory")

    @property
    def home(self) -> str:
        if self._home is None:
            self._identity()
        return self._home or ""

    @property
    def uid(self) -> int:
        if self._uid is None:
            self._identity()
        return int(self._uid or 0)

    @property
    def user(self) -> str:
        if self._user is None:
            self._identity()
        return self._user or ""

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def elevated(self, cmd: str, helper: tuple[str, ...] = ()) -> str:
        """`cmd` as root: itself for root; through the helper's subcommand on a helper host (a step
        without one runs as the user there: nothing of a deployment belongs to root when its
        service runs as the user); else `sudo -n sh -c`."""
        if self.is_root:
            return cmd
        if self.helper:
            return f"sudo -n {HELPER} {shlex.join(helper)}" if helper else cmd
        return f"sudo -n sh -c {shlex.quote(cmd)}"

    def can_elevate_shell(self) -> bool:
        """Whether `elevated` works without a helper: root, or `sudo -n sh -c` allowed (a prepared
        host's rule allows `true` and the helper, not a shell)."""
        return self.is_root or self.run("sudo -n sh -c true", check=False, what="sudo check").rc == 0

    def run(self, cmd: str, *, sudo: bool = False, check: bool = True, timeout: float | None = None,
            stdin: bytes | None = None, what: str = "", helper: tuple[str, ...] = (), first: str = "") -> Result:
        """Run `cmd` under sh; `sudo` elevates it (see `elevated`) when the user is not root; `first`
        (never elevated) runs before it in the same command, and `cmd` only when it succeeded."""
        if sudo:
            cmd = self.elevated(cmd, helper)
        if first:
            cmd = f"{{ {first}; }} && {{ {cmd}\n}}"
        res = self._exec(cmd, timeout, stdin)
        if res.rc != 0 and any(t in res.stderr for t in DISK_FULL_TEXT):
            raise self.disk_full(what or "command", detail=res.stderr.strip()[-300:])
        if check and res.rc != 0:
            detail = (res.stderr.strip() or res.stdout.strip())[-1500:]
            raise MurError(self.error_code, f"{self.label}: {what or 'command'} failed (exit {res.rc}): {detail}\n  command: {cmd[:300]}")
        return res

    def put_file(self, src: Path | bytes, dst: str, mode: int = 0o644, scratch: str | None = None) -> None:
        """Atomically place a file: copy to a temp name beside `dst`, chmod, rename over.

        A failed copy is checked against the free space where it went: a full filesystem is
        E-DEPLOY-014 naming it and the bytes the file needed, not the transport's bare "Failure".
        `scratch`: copy there instead (a staging directory on the same filesystem), so an
        interrupted copy of a shared file never lies beside it."""
        name = f"{Path(dst).name}.mur-tmp-{secrets.token_hex(4)}"
        tmp = f"{scratch}/{name}" if scratch else f"{Path(dst).parent}/{name}"
        try:
            self._put(src, tmp)
        except MurError as err:
            size = len(src) if isinstance(src, bytes) else _size_of(src)
            full = self._full_for(str(Path(dst).parent), size)
            if full is not None:
                raise full from err
            raise
        self.run(f"chmod {mode:o} {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(dst)}",
                 what=f"install {dst}")

    def space(self, path: str) -> tuple[str, str, int] | None:
        """(filesystem, mount point, free bytes) of the filesystem holding `path` (or its nearest parent)."""
        probe = path
        try:
            res = self._exec(f"p={shlex.quote(probe)}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do p=$(dirname \"$p\"); done; "
                             "df -Pk \"$p\"", 15.0, None)
        except MurError:
            return None
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        cols = lines[-1].split() if len(lines) >= 2 else []
        try:
            return cols[0], cols[5], int(cols[3]) * 1024
        except (IndexError, ValueError):
            return None

    def _full_for(self, path: str, size: int) -> MurError | None:
        room = self.space(path)
        if room is None or room[2] >= size + (1 << 20):
            return None
        return self.disk_full(f"upload to {path}", need=size, room=room)

    def disk_full(self, what: str, *, need: int | None = None, room: tuple[str, str, int] | None = None,
                  detail: str = "") -> MurError:
        """E-DEPLOY-014: the filesystem, where it is mounted, and the bytes needed and free."""
        need = need if need is not None else self.need_bytes
        room = room or self.space(self._home or "/")
        during = f" during {self.doing}" if self.doing else ""
        fs = f"{room[0]} (mounted on {room[1]}, {_human(room[2])} free)" if room else "the target's filesystem"
        wanted = f": {_human(need)} needed" if need else ""
        return MurError("E-DEPLOY-014", f"{self.label}: no space left on {fs}{during} ({what}){wanted}"
                        + (f"\n  remote: {quoted(detail)}" if detail else ""),
                        "free space on that filesystem (or give the deploy user a larger home), then deploy again; "
                        "`mur deploy gc` removes what interrupted deploys left")

    # bytes the step in progress still has to write (set by the provider; named by disk_full)
    need_bytes: int = 0

    def exists(self, path: str) -> bool:
        return self.run(f"test -e {shlex.quote(path)}", check=False, what=f"test {path}").rc == 0

    def digests(self, paths: Iterable[str]) -> dict[str, str]:
        """sha256 of each existing path (missing ones are absent), in one round trip per 200."""
        paths = list(dict.fromkeys(paths))
        out: dict[str, str] = {}
        for i in range(0, len(paths), 200):
            chunk = paths[i:i + 200]
            res = self.run("sha256sum -- " + " ".join(shlex.quote(p) for p in chunk) + " 2>/dev/null; true",
                           check=False, what="digests")
            for line in res.stdout.splitlines():
                digest, _, name = line.partition("  ")
                if len(digest) == 64:
                    out[name.lstrip("*")] = digest
        return out

    def uname(self) -> tuple[str, str]:
        res = self.run("uname -s; uname -m", what="uname")
        system, machine = (res.stdout.split() + ["", ""])[:2]
        return system, machine


def _size_of(src: Path | str) -> int:
    try:
        return Path(src).stat().st_size
    except OSError:
        return 0


def _human(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB ({n} bytes)"
    return f"{n} bytes"


@contextlib.contextmanager
def loopback(port: int) -> Iterator[tuple[str, int]]:
    """open_port for targets whose loopback is this machine's (local, Docker with host network)."""
    yield "127.0.0.1", port
