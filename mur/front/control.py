"""The operator's side of a front: the next configuration as data, the shell commands that install it
on a target, and the wait for the front to apply (or refuse) it.

    ctl = FrontControl(shell, "/home/u/.murmur/deployments/dep_x/front")   # shell(cmd) -> stdout
    cfg = switch(ctl.config(), Backend("release-4", 41873))                 # release-3 drains
    ctl.apply(cfg)                  # write front.json, SIGHUP, wait: FrontError if it was refused
    ctl.wait_drained("release-3")   # its tasks ended; then stop it, and ctl.apply(retire(cfg, "release-3"))

`shell` is whatever runs a command where the front lives (a Target's run, or a local subprocess), so
one code path serves SSH hosts, this machine and containers.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
from dataclasses import replace
from typing import Any, Callable

from mur.front.config import CONFIG_NAME, STATE_NAME, Backend, ConfigError, FrontConfig

Shell = Callable[[str], str]


class FrontError(Exception):
    """The front refused a configuration, or did not answer in time (the message says which)."""


def switch(cfg: FrontConfig, new: Backend) -> FrontConfig:
    """`new` becomes active; the active one drains; draining ones keep draining; standby ones stay."""
    backends = [replace(b, role="standby" if b.role == "standby" else "draining") for b in cfg.backends
                if b.name != new.name]
    return replace(cfg, backends=(replace(new, role="active"), *backends), generation=cfg.generation + 1)


def standby(cfg: FrontConfig, name: str) -> FrontConfig:
    """A drained backend stays, as the fallback while the active one refuses connections."""
    return replace(cfg, backends=tuple(replace(b, role="standby") if b.name == name else b for b in cfg.backends),
                   generation=cfg.generation + 1)


def retire(cfg: FrontConfig, name: str) -> FrontConfig:
    return replace(cfg, backends=tuple(b for b in cfg.backends if b.name != name), generation=cfg.generation + 1)


def write_command(front_dir: str, cfg: FrontConfig) -> str:
    """Install `cfg` atomically (private from the first byte), then tell a running front (SIGHUP; a
    front that is not running reads it at start, and a lost signal costs one poll)."""
    q = shlex.quote
    data = base64.b64encode((json.dumps(cfg.to_dict(), sort_keys=True) + "\n").encode()).decode()
    tmp = f"{front_dir}/.{CONFIG_NAME}.tmp"
    return (f"mkdir -p {q(front_dir)} && chmod 700 {q(front_dir)} && umask 077 && "
            f"echo {data} | base64 -d > {q(tmp)} && mv -f {q(tmp)} {q(front_dir + '/' + CONFIG_NAME)} && "
            f"{signal_command(front_dir, 'HUP')}")


def signal_command(front_dir: str, sig: str) -> str:
    """Signal the front whose state.json names a live `mur front` process (never a reused pid)."""
    q = shlex.quote
    return (f"p=$(sed -n 's/.*\"pid\": *\\([0-9][0-9]*\\).*/\\1/p' {q(front_dir + '/' + STATE_NAME)} 2>/dev/null); "
            f"if [ -n \"$p\" ] && tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q ' front run '; "
            f"then kill -{sig} $p; fi; true")


def read_command(front_dir: str) -> str:
    q = shlex.quote
    return f"cat {q(front_dir + '/' + CONFIG_NAME)} 2>/dev/null; echo; echo '@@mur@@'; cat {q(front_dir + '/' + STATE_NAME)} 2>/dev/null; true"


class FrontControl:
    def __init__(self, shell: Shell, front_dir: str, poll: float = 0.2):
        self.shell, self.dir, self.poll = shell, front_dir, poll

    def read(self) -> tuple[FrontConfig | None, dict[str, Any] | None]:
        """(front.json, state.json) as they are now; None for a missing or unreadable one."""
        out = self.shell(read_command(self.dir))
        head, _, tail = out.partition("@@mur@@")
        try:
            cfg = FrontConfig.from_dict(json.loads(head)) if head.strip() else None
        except (ValueError, ConfigError):
            cfg = None
        try:
            state = json.loads(tail) if tail.strip() else None
        except ValueError:
            state = None
        return cfg, state if isinstance(state, dict) else None

    def config(self) -> FrontConfig | None:
        return self.read()[0]

    def state(self) -> dict[str, Any] | None:
        return self.read()[1]

    def apply(self, cfg: FrontConfig, timeout: float | None = None) -> dict[str, Any]:
        """Install `cfg` and wait until the front serves it; FrontError when it refused or did not answer.

        A refused configuration does not stay on disk: what the front serves is written back (under
        a newer generation), so a restarted front starts with the backends that answered.
        """
        before = self.config()
        self.shell(write_command(self.dir, cfg))
        try:
            return self.wait(lambda st: st.get("generation") == cfg.generation, cfg,
                             timeout if timeout is not None else cfg.switch_wait + 10)
        except FrontError:
            if before is not None:
                back = replace(before, generation=cfg.generation + 1)
                self.shell(write_command(self.dir, back))
                try:
                    self.wait(lambda st: st.get("generation") == back.generation, back, 10)
                except FrontError:
                    pass
            raise

    def wait(self, done: Callable[[dict[str, Any]], bool], cfg: FrontConfig, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state() or {}
            if done(state):
                return state
            error = state.get("error") or ""
            if f"generation {cfg.generation} refused" in error:
                raise FrontError(error)
            if time.monotonic() >= deadline:
                raise FrontError(f"the front did not take generation {cfg.generation} within {timeout:.0f}s"
                                 + (f" (it says: {error})" if error else "")
                                 + ("" if state else " (it is not running)"))
            time.sleep(self.poll)

    def wait_drained(self, name: str, timeout: float) -> dict[str, Any]:
        """Wait until backend `name` drained (its tasks ended, no request in flight) or is gone."""
        def drained(st: dict[str, Any]) -> bool:
            entry = next((b for b in st.get("backends") or () if b.get("name") == name), None)
            return entry is None or bool(entry.get("drained"))
        cfg = self.config()
        if cfg is None:
            return {}
        return self.wait(drained, cfg, timeout)
