"""This machine as a deploy target (the default with no --host): same layout and supervisor path
as a VM without systemd, reached through a local shell instead of SSH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from mur.deploy.targets.base import Result, Target
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
        return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))

    def _put(self, src: Path | bytes, dst: str) -> None:
        try:
            if isinstance(src, bytes):
                fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(src)
            else:
                shutil.copyfile(src, dst)
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot write {dst}: {exc.strerror or exc}") from exc

    def _get(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot read {path}: {exc.strerror or exc}") from exc

    def agent_card(self, port: int, wait: float, runtime: str) -> dict:
        from mur.deploy.supervisor import agent_card

        return agent_card(f"http://127.0.0.1:{port}", wait=wait)

    def stream(self, cmd: str, sink: Callable[[bytes], None]) -> int:
        proc = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sink(chunk)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
        return proc.returncode
