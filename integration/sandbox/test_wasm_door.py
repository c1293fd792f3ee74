"""The same attack families through a WASM tool (issue 27, item 5): a guest runs in mur's own process,
with the tools' workdir (on the session disk, reached through the namespace that holds it) as its
WASI preopen. A shell tool plants links pointing out of the workdir, and the guest follows them;
trailing-slash paths; `..`; writes into the read-only part of its preopen (the staged tools/); a
write past the disk ceiling. Each next to its control (the same link works for a plain process).

And the wasmtime in use carries 2026's WASI filesystem fixes: a read-only preopen cannot be written
or truncated (GHSA-2r75-cxrj-cmph), nor written through a hard link or rename into a read-write one
(GHSA-4ch3-9j33-3pmj), and a symlink or path with a trailing slash does not leave the preopen
(GHSA-vqjp-4c8c-hfgg, fixed in wasmtime 48; mur pins 51, which also refuses Windows drive prefixes,
GHSA-f2pq-268w-886c).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hostile import DEFAULT_SHELL, FINAL_TEXT, seed_cache  # type: ignore[import-not-found]
from mur.sandbox.probe import probe_host

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]

CEILING = 8 << 20


@pytest.fixture(scope="module")
def probe_wasm() -> Path:
    from mur.wasm.build import build_component

    return build_component(Path(__file__).resolve().parents[2] / "tests" / "wasm" / "guests" / "probe", "tool")


def refused_by_the_disk(error: str) -> bool:
    """ENOSPC as a guest sees it: WASI 0.2 reports a failed stream write as the stream closing."""
    return "No space left" in error or "Broken pipe" in error


def call(op: str, **kw) -> dict:
    return {"name": "probe", "input": {"op": op, **kw}}


def answer(result) -> dict:
    return json.loads(result.body["data"]) if result.body and result.body.get("data") else {"raw": result.content}


# --- the version: 2026's fixes, against the wasmtime in use ------------------------------------


REAL_PREOPEN: list = [None]


def run_guest(wasm: Path, preopens: list[tuple[Path, str, bool]], request: dict, monkeypatch) -> dict:
    """Call the probe guest with these (host dir, guest path, mutable) preopens."""
    import wasmtime

    from mur.manifest.capsule import Limits
    from mur.wasm.host import GuestConfig, WasmHost
    from mur.wasm.types import ToolInput

    original = REAL_PREOPEN[0] = REAL_PREOPEN[0] or wasmtime.WasiConfig.preopen_dir  # not a patched one

    def preopen(self, _path, _guest, fs_mutable=True):
        for host, guest, mutable in preopens:
            original(self, str(host), guest, mutable)

    monkeypatch.setattr(wasmtime.WasiConfig, "preopen_dir", preopen)
    cfg = GuestConfig(wasm_path=wasm, label="probe", preopen=preopens[0][0], env=[], limits=Limits())
    result = WasmHost().call_tool(cfg, ToolInput(data=json.dumps(request)))
    return json.loads(result.data)


def test_the_wasmtime_in_use_carries_the_2026_wasi_filesystem_fixes(probe_wasm, tmp_path, monkeypatch):
    import importlib.metadata

    assert tuple(int(p) for p in importlib.metadata.version("wasmtime").split(".")[:2]) >= (51, 0)
    ro, rw, outside = tmp_path / "ro", tmp_path / "rw", tmp_path / "outside"
    for d in (ro, rw, outside):
        d.mkdir()
    (ro / "victim.txt").write_text("read-only content\n")
    (outside / "secret.txt").write_text("SECRET-OUTSIDE\n")
    opens = [(ro, "/ro", False), (rw, "/rw", True)]
    assert run_guest(probe_wasm, opens, {"op": "read", "path": "/ro/victim.txt"}, monkeypatch)["ok"]  # the control
    for request in ({"op": "write", "path": "/ro/victim.txt", "text": "pwned"},
                    {"op": "truncate", "path": "/ro/victim.txt"},
                    {"op": "append", "path": "/ro/victim.txt"}):
        assert not run_guest(probe_wasm, opens, request, monkeypatch)["ok"], request  # GHSA-2r75-cxrj-cmph
    for request in ({"op": "link", "src": "/ro/victim.txt", "path": "/rw/alias"},  # GHSA-4ch3-9j33-3pmj
                    {"op": "rename", "src": "/ro/victim.txt", "path": "/rw/moved"}):
        run_guest(probe_wasm, opens, request, monkeypatch)
        run_guest(probe_wasm, opens, {"op": "write", "path": request["path"], "text": "pwned"}, monkeypatch)
    assert (ro / "victim.txt").read_text() == "read-only content\n"
    os.symlink(str(outside) + "/", rw / "trailing")  # GHSA-vqjp-4c8c-hfgg: trailing slashes
    os.symlink(os.path.relpath(outside, rw) + "/", rw / "relative")
    for path in ("/rw/trailing/secret.txt", "/rw/trailing/", "/rw/relative/secret.txt", "/rw/relative/",
                 "/rw/../outside/secret.txt", "/rw/trailing//secret.txt"):
        got = run_guest(probe_wasm, opens, {"op": "read", "path": path}, monkeypatch)
        assert not got["ok"] and "SECRET-OUTSIDE" not in json.dumps(got), (path, got)
    made = run_guest(probe_wasm, opens, {"op": "symlink", "target": "/", "path": "/rw/root/"}, monkeypatch)
    assert not made["ok"] or not run_guest(probe_wasm, opens, {"op": "listdir", "path": "/rw/root/"},
                                           monkeypatch)["ok"]


# --- through mur run: the guest against the tools' tree -------------------------------------------


@pytest.fixture(params=["root", "non-root"])
def who(request):
    if not probe_host().sealed:
        pytest.skip(f"no composed root here: {probe_host().sealed_reason}")
    return None if request.param == "root" else request.getfixturevalue("unprivileged_user")


def test_a_guest_following_what_a_shell_tool_planted_stays_in_the_workdir(hostile, who, probe_wasm, tmp_path,
                                                                          record_escape):
    from hostile import tool_artifact  # type: ignore[import-not-found]

    base = Path(__import__("tempfile").mkdtemp(prefix="mur-wasm-door-", dir="/tmp"))
    os.chmod(base, 0o755)
    tool = tool_artifact(base / "probe", "probe", probe_wasm, "file ops")
    if who is not None:
        seed_cache(who.home / ".murmur" / "cache", [tool / "probe.wasm"])
    secret = (who.home if who is not None else tmp_path) / "secret.txt"
    secret.write_text("host secret\n")
    if who is not None:
        who.chown(secret)
    capsule = hostile(user=who, shell_allow=DEFAULT_SHELL, artifacts=[("probe", tool)],
                      capabilities=f"resources:\n  workdir_max_bytes: {CEILING}")
    run = capsule.run([
        f"ln -s {secret} abs; ln -s {secret.parent}/ absdir; ln -s ../../../../../../../..{secret} rel; "
        "echo x > plain; mkdir -p d; echo rc=$?",  # 0: the shell tool plants the links
        call("read", path="abs"), call("read", path="absdir/secret.txt"), call("read", path="rel"),  # 1-3
        call("read", path="plain/"), call("read", path="d/../../trace.jsonl"), call("listdir", path=".."),  # 4-6
        call("write", path="tools/probe/murmur.yaml", text="name: pwned"),  # 7: read-only part of the preopen
        call("write", path="mine.txt", text="guest output"),  # 8: the control inside
        call("fill", path="big.bin", mb=3 * (CEILING >> 20)),  # 9: past the disk ceiling
    ])
    results = [answer(r) for r in run.results[1:]]
    for i, got in enumerate(results[:7], start=1):
        assert got.get("ok") is False and "host secret" not in json.dumps(got), (i, got)
    assert results[7]["ok"] is True  # its own file, in its workdir
    assert results[8]["ok"] is False and refused_by_the_disk(results[8]["error"]), results[8]
    assert run.returncode == 1 and "error[E-RUN-013]" in run.stderr, run.describe()
    assert (run.accessible / "mine.txt").read_text() == "guest output"
    assert (run.accessible / "tools" / "probe" / "murmur.yaml").read_text().startswith("name: probe")
    # the control: the links work for a plain process of the same uid
    prefix = [] if who is None else ["setpriv", f"--reuid={who.uid}", f"--regid={who.gid}", "--clear-groups", "--"]
    bare = subprocess.run([*prefix, "cat", str(run.accessible / "abs")], capture_output=True, text=True)
    assert bare.stdout == "host secret\n"
    __import__("shutil").rmtree(base, ignore_errors=True)
    tag = "root" if who is None else "non-root"
    record_escape(f"wasm guest: planted links, trailing slash, .., tools/, fill ({tag})",
                  "refused; ENOSPC, E-RUN-013", "cat follows the link")


def test_a_hook_writing_its_file_never_follows_a_link_a_tool_planted(hostile, who, tmp_path, record_escape):
    """murmur-hook-eval appends eval.jsonl in its preopen (the workdir) at session end: a shell tool
    replaced that name with links out of the workdir. The hook's write stays in the workdir."""
    from hostile import HostileCapsule  # type: ignore[import-not-found]

    examples = Path(__file__).resolve().parents[2] / "examples"
    hook = examples / "murmur-hook-eval"
    if not (hook / "murmur-hook-eval.wasm").is_file():
        pytest.skip("run scripts/build-examples")
    if who is not None:
        seed_cache(who.home / ".murmur" / "cache", [examples / "murmur-driver-anthropic" / "murmur-driver-anthropic.wasm",
                                                 hook / "murmur-hook-eval.wasm"])
    victim = (who.home if who is not None else tmp_path) / "victim.txt"
    victim.write_text("host file\n")
    if who is not None:
        who.chown(victim)

    class HookCapsule(HostileCapsule):
        def _write_manifest(self, port: int, turns: int) -> None:
            super()._write_manifest(port, turns)
            entry = (f"  - name: murmur-hook-eval\n    runtime: hook\n    source: {hook}\n    local_source: true\n"
                     "    capabilities:\n      filesystem:\n        scope: .\n")
            text = self.manifest.read_text().replace("capabilities:\n  network:", entry + "capabilities:\n  network:", 1)
            self.manifest.write_text(text + "observability:\n  eval:\n    scorers:\n      - {type: exit_ok, name: ok}\n")

    base = who.home if who is not None else tmp_path
    capsule = HookCapsule(base / "hook-capsule", user=who)
    run = capsule.run([f"ln -s {victim} eval.jsonl; ln -s ../../../../../../../../{victim} hook-debug.jsonl; echo rc=$?"])
    assert run.returncode == 0, run.describe()
    assert victim.read_text() == "host file\n"  # the hook's write did not go through the link
    eval_file = run.accessible / "eval.jsonl"
    assert not eval_file.is_symlink() and '"record_type":"dataset_run"' in eval_file.read_text()  # in the workdir
    # the control: a plain process appending to such a name writes the file the link leads to
    control = tmp_path / "control"
    control.mkdir()
    (control / "target.txt").write_text("host file\n")
    os.symlink(control / "target.txt", control / "eval.jsonl")
    subprocess.run(["bash", "-c", "echo appended >> eval.jsonl"], cwd=control, check=True)
    assert (control / "target.txt").read_text() == "host file\nappended\n"
    tag = "root" if who is None else "non-root"
    record_escape(f"hook: eval.jsonl planted as a link out ({tag})", "the hook's write stays in the workdir",
                  "cat follows the link")


def test_a_capsule_without_subprocesses_gets_the_kernel_counted_ceiling_too(hostile, probe_wasm, tmp_path):
    """No shell, no spawn: only guests write the workdir. The same disk (mur.sandbox.guestdisk), so a
    guest's write past the ceiling fails with ENOSPC and the session reports E-RUN-013."""
    from hostile import HostileCapsule, tool_artifact  # type: ignore[import-not-found]

    class NoShell(HostileCapsule):
        def _write_manifest(self, port: int, turns: int) -> None:
            super()._write_manifest(port, turns)
            lines = self.manifest.read_text().splitlines(keepends=True)
            start = next(i for i, line in enumerate(lines) if line.startswith("  shell:"))
            end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
            self.manifest.write_text("".join(lines[:start] + lines[end:]))

    tool = tool_artifact(tmp_path / "probe", "probe", probe_wasm, "file ops")
    capsule = NoShell(tmp_path / "noshell", artifacts=[("probe", tool)],
                      capabilities=f"resources:\n  workdir_max_bytes: {CEILING}")
    run = capsule.run([call("fill", path="big.bin", mb=3 * (CEILING >> 20)), call("write", path="after.txt")])
    got = answer(run.results[0])
    assert got["ok"] is False and refused_by_the_disk(got["error"]), got
    start = run.events("session_start")[0]["effective_grants"]
    assert start["disk_ceiling"] in ("ext4-loop", "tmpfs") and start["shell_allow"] == []
    assert run.returncode == 1 and "error[E-RUN-013]" in run.stderr, run.describe()
    assert (run.accessible / "big.bin").stat().st_size <= CEILING + (1 << 20)
