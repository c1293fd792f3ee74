"""Plain `mur run` refuses before anything exists: E-CAP-003 and manifest errors, through the real CLI.

"Before any registry pull, artifact compile or workdir creation" (spec, Containment class): after a
refusal the project directory holds exactly what the test put there.
"""

from __future__ import annotations

import os
import re

import pytest

from manifest_support import run_mur

# A capsule no host seals, whatever the kernel: its shell tools ask for the host's unix sockets.
UNSEALABLE = "capabilities:\n  network:\n    unix_sockets: true\n  shell:\n    allow: [bash]\n"
SEALED_REFUSAL = (
    "error[E-CAP-003]: declared containment class 'sealed' is not achievable on this host (achieved: 'scoped'): "
    "sealed requires mount-namespace + pivot_root isolation (the tools in a root built for the session), which "
    "this host cannot provide: capabilities.network.unix_sockets: true asks for every unix socket the shell tools "
    "can reach on the host (a Docker socket, say), which a root built for the session would hide: its tools see "
    "the host's tree\n"
    "  hint: lower the declared floor to 'scoped' (capabilities.containment in murmur.yaml, containment in "
    ".murmur/config.yaml, or --containment), or run on a host that provides 'sealed'\n"
)

# An artifact that is installed nowhere: if the refusal came late, this would say E-RUN-008 instead.
UNINSTALLED = 'artifacts:\n  - name: not-installed-anywhere\n    version: "1.0.0"\n'


def _files(proj):
    return sorted(str(p.relative_to(proj)) for p in proj.rglob("*"))


@pytest.mark.requires_landlock
@pytest.mark.parametrize(
    "manifest, args, project_config",
    [
        (UNSEALABLE + "  containment: sealed\n", [], None),
        (UNSEALABLE + "  containment: advisory\n", ["--containment", "sealed"], None),
        (UNSEALABLE, [], "containment: sealed\n"),
    ],
    ids=["manifest", "cli-flag", "project-config"],
)
def test_sealed_is_refused_before_any_workdir(project, manifest, args, project_config):
    home, proj = project
    (proj / "murmur.yaml").write_text('name: c\nversion: "0.1.0"\n' + UNINSTALLED + manifest)
    if project_config:
        (proj / ".murmur").mkdir()
        (proj / ".murmur" / "config.yaml").write_text(project_config)
    before = _files(proj)
    run = run_mur("run", "--manifest", "murmur.yaml", *args, cwd=proj, home=home)
    assert (run.code, run.out, run.err) == (1, "", SEALED_REFUSAL)
    assert _files(proj) == before
    assert not (proj / "workdir").exists() and not (proj / "murmur.lock").exists()
    # no store, no cache, no config written: only the kernel probe's per-boot answer (mur.sandbox.probecache),
    # beside the capsule host's socket and lock: a service's run (no --task) goes to it (docs/run.md)
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*")
                     if not p.is_dir() and p.relative_to(home).parts[:2] != (".murmur", "run"))
    assert len(written) == 1 and re.fullmatch(rf"\.murmur/cache/probe/host-{os.geteuid()}-[0-9a-f]{{12}}\.json",
                                              written[0]), written


@pytest.mark.requires_landlock
def test_a_sealed_floor_passes_where_the_probe_built_the_composed_root(project):
    """On a host whose probe built and verified the tools' root, a sealed floor is met: the run goes
    on to the next check (the uninstalled artifact, E-RUN-008); elsewhere it is E-CAP-003 naming
    the blocker the probe found."""
    from mur.sandbox.probe import probe_host

    home, proj = project
    (proj / "murmur.yaml").write_text('name: c\nversion: "0.1.0"\n' + UNINSTALLED + "capabilities:\n  containment: sealed\n")
    run = run_mur("run", "--manifest", "murmur.yaml", cwd=proj, home=home)
    host = probe_host()
    if host.sealed:
        assert run.code == 1 and run.err.startswith("error[E-RUN-008]"), run.err
    else:
        assert run.code == 1 and run.err.startswith("error[E-CAP-003]") and host.sealed_reason in run.err
    assert not (proj / "workdir").exists()


@pytest.mark.requires_landlock
def test_workdir_exec_with_a_scoped_floor_is_refused(project):
    home, proj = project
    (proj / "murmur.yaml").write_text(
        'name: c\nversion: "0.1.0"\ncapabilities:\n  filesystem:\n    workdir_exec: true\n  containment: scoped\n')
    run = run_mur("run", "--manifest", "murmur.yaml", cwd=proj, home=home)
    assert run.code == 1
    first, hint = run.err.splitlines()
    assert first.startswith(
        "error[E-CAP-003]: declared containment class 'scoped' is not achievable on this host (achieved: "
        "'advisory'): capabilities.filesystem.workdir_exec: true keeps the Landlock Execute right")
    assert hint.startswith("  hint: lower the declared floor to 'advisory' ")
    assert _files(proj) == ["murmur.yaml"]


@pytest.mark.parametrize(
    "body, first_line",
    [
        ("capabilities:\n  limits:\n    memory_bytes: 0\n",
         "error[E-MAN-003]: murmur.yaml: invalid capability config for 'capabilities.limits.memory_bytes': "
         "must be greater than zero"),
        ("capabilities:\n  network:\n    allow: [https://api.example.com/v1]\n",
         "error[E-CAP-001]: invalid network allow entry 'https://api.example.com/v1': URL allow entries must "
         "not include path, query, or fragment"),
        ("capabilities:\n  filesystem:\n    scope: /etc\n",
         "error[E-CAP-002]: invalid filesystem scope '/etc': scope must be relative to the workdir"),
    ],
    ids=["E-MAN-003", "E-CAP-001", "E-CAP-002"],
)
def test_invalid_manifests_are_refused_before_any_workdir(project, body, first_line):
    home, proj = project
    (proj / "murmur.yaml").write_text('name: c\nversion: "0.1.0"\n' + UNINSTALLED + body)
    run = run_mur("run", "--manifest", "murmur.yaml", cwd=proj, home=home)
    assert (run.code, run.out) == (1, "")
    assert run.err.splitlines()[0] == first_line
    assert _files(proj) == ["murmur.yaml"]


def test_dotenv_beside_the_manifest_feeds_api_key_references(project):
    home, proj = project
    (proj / "murmur.yaml").write_text(
        'name: c\nversion: "0.1.0"\ninference:\n  transport: http\n  model: m\n  api_key: ${MY_PROVIDER_KEY}\n')
    (proj / ".env").write_text("MY_PROVIDER_KEY=from-dotenv\n")
    run = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", "--json", cwd=proj, home=home)
    assert (run.code, run.err) == (0, "")
    run = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", "--json", "--no-env-file", cwd=proj, home=home)
    assert (run.code, run.out) == (1, "")
    assert run.err.splitlines()[0] == (
        "error[E-MAN-003]: murmur.yaml: inference.api_key references ${MY_PROVIDER_KEY} but the environment "
        "variable is not set")


def test_an_unsearchable_manifest_directory_is_a_permission_error(project, monkeypatch):
    """`.env` is looked for before the manifest is read; a stat refused there must not crash the run."""
    from pathlib import Path

    from mur.errors import MurError
    from mur.session import prechecks
    from mur.session.options import RunOptions

    def refused(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "is_file", refused)
    monkeypatch.setattr(Path, "read_bytes", refused)
    with pytest.raises(MurError) as err:
        prechecks.explain(RunOptions(manifest=Path("murmur.yaml"), explain_scope=True, json=True))
    assert (err.value.code, err.value.message) == ("E-IO-002", "permission denied reading murmur.yaml")


def test_a_manifest_path_with_a_line_break_is_named_on_one_line(project):
    home, proj = project
    run = run_mur("run", "--manifest", "no\nsuch.yaml", "--explain-scope", "--json", cwd=proj, home=home)
    assert (run.code, run.out) == (1, "")
    assert run.err == (
        "error[E-IO-001]: manifest not found: no\\nsuch.yaml\n"
        "  hint: pass --manifest PATH, or run from the directory holding murmur.yaml\n")


def test_a_refused_run_writes_no_lock(project):
    """murmur.lock is `mur run`'s one write, made after every pre-check passed: an installed artifact
    plus a missing capsule component (E-RUN-004) leaves the project as it was."""
    import io
    import zipfile

    from mur.artifacts.store import install_zip, project_store

    home, proj = project
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("murmur.yaml", 'name: greet\nversion: "0.1.0"\nruntime: skill\n')
        z.writestr("skill.md", "# greet\n")
    install_zip(project_store(proj), buf.getvalue())
    (proj / "murmur.yaml").write_text(
        'name: c\nversion: "0.1.0"\nartifacts:\n  - name: greet\n    version: "0.1.0"\n    runtime: skill\n'
        "    local_source: false\n")
    run = run_mur("run", "--manifest", "murmur.yaml", cwd=proj, home=home)
    assert run.code == 1 and run.err.startswith("error[E-RUN-004]: capsule wasm not found"), run.err
    assert not (proj / "murmur.lock").exists() and not (proj / "workdir").exists()
