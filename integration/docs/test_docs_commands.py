"""Docs match behaviour: every `mur ...` line in a fenced block of README.md and docs/*.md either runs
(exit 0) in a scratch HOME and project, or is a synopsis whose command exists (`--help` exits 0), or
is in SKIP with the reason. A new doc line is therefore checked the moment it is written.

Lines run in document order, per file, in a copy of examples/ (hard links: cheap, and the originals
stay untouched), with HOME and MUR_CACHE_DIR in the scratch directory (the compile cache and the guest
builds are seeded by hard links from the real ones, so nothing is recompiled when CI's
scripts/build-examples ran first). Under a minute.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.requires_landlock, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"\[|<|\||\b[A-Z][A-Z_]+\b")

# (file name or None for any, line prefix) -> why it is not run here.
SKIP = {
    ("deploy.md", "mur "): "docs/deploy.md belongs to the deploy owner (h13, who is making `deploy logs --json` "
                          "work); its commands run against real targets in integration/deploy/",
    (None, "mur deploy"): "deploys need a target; integration/deploy/ runs them",
    (None, "mur send "): "needs a running capsule; integration/a2a/ runs it",
    (None, "mur registry serve"): "a server that runs until stopped; integration/artifacts/ runs it",
    ("ci.md", "mur "): "GitHub Actions steps (`${{ }}` expressions, a VM or host per job); integration/provision/ "
                       "runs the same sequence",
    ("kubernetes.md", "mur "): "run in a capsule's directory, pushing to the reader's registry; integration/export/ "
                               "and integration/image/ run them against a loopback registry",
    ("image.md", "mur export k8s"): "run in a capsule's directory; integration/export/ runs it",
    (None, "mur vm "): "boots a qemu VM (minutes under TCG); integration/provision/ runs it",
    (None, "mur host prepare"): "changes a real host over SSH; integration/provision/ runs it against VMs",
}


@dataclass(frozen=True)
class DocLine:
    file: Path
    number: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.file.name}:{self.number}"


def doc_lines() -> list[DocLine]:
    """Every `mur ...` line of a fenced block, its trailing `# comment` removed."""
    found = []
    for path in DOCS:
        fenced = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            text = line.strip().removeprefix("$ ")
            if fenced and text.startswith("mur "):
                found.append(DocLine(path, number, re.sub(r"\s+#\s.*$", "", text).strip()))
    return found


def skip_reason(line: DocLine) -> str | None:
    for (name, prefix), why in SKIP.items():
        if (name is None or line.file.name == name) and line.text.startswith(prefix):
            return why
    return None


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("docs")
    home, cache = base / "home", base / "home" / ".murmur" / "cache"
    cache.mkdir(parents=True)
    os.chmod(cache, 0o700)
    _link_copy(ROOT / "examples", base / "examples", ignore=("workdir", ".murmur"))
    real = Path(os.environ.get("MUR_CACHE_DIR") or Path.home() / ".murmur" / "cache")
    for part in ("wasm", "components"):  # compiled components, guest builds: reused, never rebuilt
        if (real / part).is_dir():
            _link_copy(real / part, cache / part)
            os.chmod(cache / part, 0o700)
    return {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(home), "LANG": "C.UTF-8",
            "MUR_CACHE_DIR": str(cache), "SHELL": "/bin/bash", "CWD": str(base)}


def _link_copy(src: Path, dst: Path, ignore: tuple[str, ...] = ()) -> None:
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link, ignore=shutil.ignore_patterns(*ignore), symlinks=True)


def _by_file() -> list:
    lines = doc_lines()
    return [pytest.param([ln for ln in lines if ln.file == path], id=path.name) for path in DOCS
            if any(ln.file == path for ln in lines)]


def test_doc_lines_were_found():
    assert len(doc_lines()) >= 20  # the extractor still sees the docs' fences


@pytest.mark.parametrize("lines", _by_file())
def test_doc_commands_run(lines: list[DocLine], scratch):
    env = {k: v for k, v in scratch.items() if k != "CWD"}
    problems = []
    for line in lines:
        if skip_reason(line) is not None:
            continue
        if PLACEHOLDER.search(line.text.split(">", 1)[0]) and " > " not in line.text:
            words = []
            for word in line.text.split()[1:]:
                if word.startswith("-") or PLACEHOLDER.search(word):
                    break
                words.append(word)
            command = [sys.executable, "-m", "mur", *words, "--help"]
        else:
            command = ["bash", "-c", line.text.replace("mur ", f"{sys.executable} -m mur ", 1)]
        started = time.monotonic()
        run = subprocess.run(command, cwd=scratch["CWD"], env=env, capture_output=True, text=True, timeout=300)
        print(f"{line.id} {time.monotonic() - started:.1f}s {line.text}")
        if run.returncode != 0:
            problems.append(f"{line.id}: `{line.text}` exited {run.returncode}: {(run.stderr or run.stdout)[-800:]}")
    assert problems == []
