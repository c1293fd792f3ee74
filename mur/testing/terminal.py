"""A `mur` command as a terminal's foreground job: for tests of what a person at a terminal sees.

``MurProcess(*args, cwd=..., env=...)`` starts ``python -m mur ARGS`` in its own process group
(a terminal's Ctrl-C reaches the whole group: :meth:`MurProcess.ctrl_c`), reads stdout and stderr
in the background, and with ``tty=True`` puts stderr on a pseudo-terminal (120 columns), so mur
draws the spinners it draws for a person. Linux only (the pty module).
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Callable


class MurProcess:
    """One running `mur` command (see the module docstring); a context manager that kills it if it
    is still running at the end."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str], tty: bool = False):
        self.out = bytearray()
        self.err = bytearray()
        master = slave = None
        if tty:
            master, slave = pty.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "mur", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=slave if tty else subprocess.PIPE,
                                     start_new_session=True)
        if slave is not None:
            os.close(slave)  # the child holds its own: EOF (EIO) on the master once it has gone
        self._master = master
        err_fd = master if master is not None else self.proc.stderr.fileno()
        self._readers = [threading.Thread(target=self._pump, args=(self.proc.stdout.fileno(), self.out), daemon=True),
                         threading.Thread(target=self._pump, args=(err_fd, self.err), daemon=True)]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(fd: int, into: bytearray) -> None:
        try:
            while chunk := os.read(fd, 65536):
                into.extend(chunk)
        except OSError:
            pass  # a pty master reads EIO once the child's side is closed

    @property
    def stdout(self) -> str:
        return self.out.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")

    def wait_for(self, ready: Callable[[], bool], timeout: float = 120, what: str = "the condition") -> None:
        """Poll `ready()` until it is true; fails when mur exits first or time runs out."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"mur exited ({self.proc.returncode}) before {what}:\n{self.stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:.0f}s:\n{self.stderr}")
            time.sleep(0.05)

    def ctrl_c(self) -> None:
        """What a terminal sends on Ctrl-C: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout: float = 60) -> int:
        """Wait for mur to exit; its status, once everything it wrote has been read."""
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for reader in self._readers:
            reader.join(10)
        if self._master is not None:
            os.close(self._master)
            self._master = None

    def __enter__(self) -> "MurProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
