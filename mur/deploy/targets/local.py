"""This machine as a deploy target (the default with no --host): same layout and supervisor path
as a VM without systemd, reached through a local shell instead of SSH."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from mur.deploy.deadlines import current as current_deadlines
from mur.deploy.targets.base import Held, Result, Target, loopback
from mur.errors import MurError


class LocalHeld(Held):
    """A long-running local shell command in its own session: a Ctrl-C at the terminal does not
    reach it (the command decides when it ends), and our death closes its stdin, which ends it."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._buf = b""

    def readline(self, timeout: float) -> str | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            data = os.read(fd, 4096)
            if not data:
                line, self._buf = self._buf, b""
                return line.decode("utf-8", "replace")
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"

    def send(self, data: bytes) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    @property
    def closed(self) -> bool:
        return self.proc.poll() is not None

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout,):
            with contextlib.suppress(OSError, ValueError):
                if f is not None:
                    f.close()


class LocalTarget(Target):
    kind = "local"
    error_code = "E-DEPLOY-004"

    @property
    def label(self) -> str:
        return "local"

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        timeout = timeout if timeout is not None else current_deadlines().command
        try:
            proc = subprocess.run(["/bin/sh", "-c", cmd], input=stdin, capture_output=True, timeout=timeout,
                                  stdin=None if stdin is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise MurError("E-DEPLOY-004", f"local command timed out after {timeout}s: {cmd[:200]}") from exc
        except OSError as exc:
            raise MurError("E-DEPLOY-004", f"cannot run a local shell: {exc.strerror or exc}") from exc
        return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))

    def _put(self, src: Path | bytes, dst: str) -> None:
        try:
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                if isinstance(src, bytes):
                    fh.write(src)
                else:
                    with open(src, "rb") as inp:
                        shutil.copyfileobj(inp, fh, 1 << 20)
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot write {dst}: {exc.strerror or exc}") from exc

    def open_port(self, port: int):
        return loopback(port)

    def hold(self, cmd: str) -> Held:
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise MurError("E-DEPLOY-004", f"cannot run a local shell: {exc.strerror or exc}") from exc
        return LocalHeld(proc)

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise MurError("E-DEPLOY-004", f"cannot run a local shell: {exc.strerror or exc}") from exc
        try:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sink(chunk)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
        return proc.returncode
