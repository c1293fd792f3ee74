"""The session's allowed binaries: where each is found, what its Landlock grant must cover, and the
argv a call becomes.

Found once per session on the host PATH minus the entries a tool could have filled; as root on
Linux with Landlock, each binary's loader + DT_NEEDED closure (``elf``) and its interpreter_runtime
extension dirs are what the policy grants execute on.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mur import fsafe
from mur.errors import MurError
from mur.sandbox import elf, policy as pol


@dataclass
class Binary:
    name: str
    path: str | None  # what we exec (PATH lookup)
    canonical: str | None  # realpath, reported as `binary`
    closure: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # the closure as the loader names it (elf.Closure.named)


def lookup_path(host_env: Mapping[str, str], workdir: str, log: Callable[[str], None]) -> str:
    """The host PATH without entries a tool could have filled: relative ones (mur's cwd) and
    ones inside the tools' workdir (a previous session's tools could plant a `bash` there, which
    would then be granted execute and run as the allowed binary)."""
    kept = []
    for entry in host_env.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isabs(entry) or fsafe.inside(os.path.realpath(entry), workdir):
            log(f"PATH entry {entry!r} is not used to find shell binaries: "
                + ("relative" if not os.path.isabs(entry) else "inside the tools' workdir"))
            continue
        kept.append(entry)
    return os.pathsep.join(kept)


def resolve(caps: Any, host_env: Mapping[str, str], workdir: str, *, with_closure: bool,
            log: Callable[[str], None]) -> dict[str, Binary]:
    """Every ``capabilities.shell.allow`` name -> its Binary (path None: not found, calls fail)."""
    path_env = lookup_path(host_env, workdir, log)
    binaries: dict[str, Binary] = {}
    for name in caps.shell_allow:
        found = shutil.which(name, path=path_env)
        if found is not None and fsafe.inside(os.path.realpath(found), workdir):
            log(f"shell binary '{name}' resolves into the tools' workdir ({found}): not used")
            found = None
        if found is None:
            log(f"shell binary '{name}' was not found on PATH: calls to it will fail")
            binaries[name] = Binary(name, None, None)
            continue
        found = os.path.abspath(found)
        info = Binary(name, found, os.path.realpath(found))
        if with_closure:
            _add_closure(info, caps, path_env, workdir, log)
        binaries[name] = info
    return binaries


def _add_closure(info: Binary, caps: Any, path_env: str, workdir: str, log: Callable[[str], None]) -> None:
    assert info.path is not None
    name = info.name
    closure = elf.closure(info.path, path_env=path_env)
    files = [f for f in closure.files if not fsafe.inside(os.path.realpath(f), workdir)]
    named = [n for n in closure.named if not fsafe.inside(os.path.realpath(n), workdir)]
    if len(files) < len(closure.files):  # a library (RUNPATH, $ORIGIN) in the tools' reach
        log(f"shell binary '{name}': files inside the tools' workdir are never granted execute: "
            + ", ".join(f for f in closure.files if f not in files))
    missing = list(closure.missing)
    for grant in caps.shell.interpreter_runtime if caps.shell else ():
        if grant.binary != name:
            continue
        for d in grant.dirs:
            if fsafe.inside(os.path.realpath(d.path), workdir):  # the tools' own tree: nothing there is granted execute
                continue
            if os.path.isdir(d.path):
                ext = elf.extension_closure(d.path, path_env=path_env)
                files += [f for f in ext.files if f not in files]
                named += [n for n in ext.named if n not in named and not fsafe.inside(os.path.realpath(n), workdir)]
    info.closure, info.missing, info.named = tuple(files), tuple(dict.fromkeys(missing)), tuple(named)
    if closure.missing:
        log(f"shell binary '{name}': libraries not found for the Landlock grant: " + ", ".join(closure.missing))


def call_argv(info: Binary, command: str | None, args: list[str] | None) -> tuple[list[str], str]:
    """(argv, the command as reported): a shell gets ``-c command``; any other binary gets the
    command split like a shell would (no expansion), without a repeated binary name."""
    name = info.name
    if command is not None and name in pol.SHELLS:
        return [name, "-c", command] + list(args or []), command
    if command is not None:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise MurError("E-RUN-015", f"cannot split the command for '{name}': {exc}") from exc
        if words and words[0] in (name, info.path, info.canonical):
            words = words[1:]  # the model wrote the binary name itself: do not pass it twice
        argv = [name] + words + list(args or [])
    else:
        argv = [name] + list(args or [])
    return argv, shlex.join(argv)
