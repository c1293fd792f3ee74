"""This machine as a deploy target (the default with no --host): same layout and supervisor path
as a VM without systemd, reached through a local shell instead of SSH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from mur.deploy.targets.base import Result, Target, loopback
from mur.errors import MurError


class LocalTarget(Target):
    kind = "local"
    error_code = "E-DEPLOY-004"

    @property
    def label(self) -> str:
        return "local"

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
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
