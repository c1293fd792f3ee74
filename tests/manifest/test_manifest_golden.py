"""Golden cases for the capsule manifest: `cases/<name>.yaml` beside what a user sees.

  <name>.json  the `mur run --explain-scope --json` object on a Landlock host (scoped, landlock+seccomp)
  <name>.err   the exact stderr (warnings, or warnings + the error); no .err means empty stderr;
               `{MUR_VERSION}` stands for the running mur version
  <name>.txt   the human `--explain-scope` report (cases marked `human`)
A case with a .json exits 0; a case without one fails with exit 1 and its .err.

Directives are leading comment lines `# case: <key> [value]`:
  cli                     also drive the real CLI in a subprocess (real probe; needs Landlock)
  human                   also compare the human report with <name>.txt
  env NAME=value          set an environment variable (api_key references)
  args --containment X    extra `mur run` arguments
  global-config <yaml>    write ~/.murmur/config.yaml (one line of flow YAML)
  project-config <yaml>   write <project>/.murmur/config.yaml
Every case runs in-process through the same path `mur run --explain-scope` takes
(mur.session.prechecks.explain), with a fake probe reporting what this host reports.
MUR_REGEN_GOLDEN=1 rewrites the expectations from the in-process run (review the diff by hand).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from manifest_support import SCOPED_HOST, run_mur
from mur import __version__
from mur.errors import MurError, set_warning_sink
from mur.sandbox.scope import render_scope_report

CASES = Path(__file__).parent / "cases"
CASE_NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))
REGEN = os.environ.get("MUR_REGEN_GOLDEN") == "1"


@dataclass
class Case:
    name: str
    text: str
    cli: bool = False
    human: bool = False
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    global_config: str | None = None
    project_config: str | None = None

    def path(self, suffix: str) -> Path:
        return CASES / f"{self.name}{suffix}"

    def expected(self, suffix: str) -> str | None:
        path = self.path(suffix)
        return path.read_text().replace("{MUR_VERSION}", __version__) if path.exists() else None


def load_case(name: str) -> Case:
    text = (CASES / f"{name}.yaml").read_text()
    case = Case(name, text)
    for line in text.splitlines():
        if not line.startswith("# case:"):
            continue
        key, _, value = line[len("# case:") :].strip().partition(" ")
        if key == "cli":
            case.cli = True
        elif key == "human":
            case.human = True
        elif key == "env":
            var, _, val = value.partition("=")
            case.env[var] = val
        elif key == "args":
            case.args.extend(shlex.split(value))
        elif key == "global-config":
            case.global_config = value
        elif key == "project-config":
            case.project_config = value
        else:
            raise AssertionError(f"{name}: unknown directive {key!r}")
    return case


def _setup(case: Case, home: Path, proj: Path) -> None:
    (proj / "murmur.yaml").write_text(case.text)
    for base, body in ((home, case.global_config), (proj, case.project_config)):
        if body is not None:
            (base / ".murmur").mkdir(exist_ok=True)
            (base / ".murmur" / "config.yaml").write_text(body + "\n")


def _containment_arg(args: list[str]) -> str | None:
    if "--containment" in args:
        return args[args.index("--containment") + 1]
    return None


def explain_in_process(case: Case, monkeypatch, host=SCOPED_HOST) -> tuple[dict | None, str]:
    """(report or None, stderr text) of `mur run --explain-scope` run in this process, on `host`."""
    from mur.session import prechecks
    from mur.session.options import RunOptions

    for var, val in case.env.items():
        monkeypatch.setenv(var, val)
    monkeypatch.setattr(prechecks, "probe", lambda: host)
    lines: list[str] = []
    previous = set_warning_sink(lambda code, message: lines.append(f"warning[{code}]: {message}"))
    report = None
    try:
        opts = RunOptions(
            manifest=Path("murmur.yaml"), containment=_containment_arg(case.args), explain_scope=True, json=True
        )
        report = prechecks.explain(opts)
    except MurError as err:
        lines.append(err.render())
    finally:
        set_warning_sink(previous)
    return report, "".join(f"{line}\n" for line in lines)


def _regen(case: Case, report: dict | None, stderr: str) -> None:
    if report is not None:
        case.path(".json").write_text(json.dumps(report, indent=2) + "\n")
    elif case.path(".json").exists():
        case.path(".json").unlink()
    if stderr:
        case.path(".err").write_text(stderr.replace(f"mur {__version__}", "mur {MUR_VERSION}"))
    elif case.path(".err").exists():
        case.path(".err").unlink()
    if case.human and report is not None:
        case.path(".txt").write_text(render_scope_report(report))


def test_there_are_several_dozen_cases():
    assert len(CASE_NAMES) >= 60


@pytest.mark.parametrize("name", CASE_NAMES)
def test_case_in_process(name, project, monkeypatch):
    case = load_case(name)
    home, proj = project
    _setup(case, home, proj)
    report, stderr = explain_in_process(case, monkeypatch)
    if REGEN:
        _regen(case, report, stderr)
    expected_json = case.expected(".json")
    assert stderr == (case.expected(".err") or "")
    if expected_json is None:
        assert report is None, "an error case must fail"
    else:
        assert report == json.loads(expected_json)
        if case.human:
            assert render_scope_report(report) == case.expected(".txt")
    assert not (proj / "workdir").exists()


CLI_CASES = [n for n in CASE_NAMES if load_case(n).cli]


def _this_host():
    """The real probe's answer, and whether it is the class the golden files were written for."""
    from mur.sandbox.probe import probe_host

    real = probe_host()
    fields = ("achieved", "mechanism", "tier", "os", "root", "netns")
    return real, all(getattr(real, f) == getattr(SCOPED_HOST, f) for f in fields)


@pytest.mark.requires_landlock
@pytest.mark.parametrize("name", CLI_CASES)
def test_case_through_the_cli(name, project, monkeypatch):
    """The same case through the real `mur` binary and the real kernel probe.

    The golden files hold what a scoped Landlock host (SCOPED_HOST) sees; a host the probe classes
    otherwise (a container without namespaces, say) is compared with the in-process run on the
    probe's own answer instead, so the CLI is checked on every host and the files stay host-free.
    """
    case = load_case(name)
    home, proj = project
    _setup(case, home, proj)
    real, golden_host = _this_host()
    if golden_host:
        expected_json, expected_err = case.expected(".json"), case.expected(".err") or ""
        expected_txt = case.expected(".txt")
    else:
        report, expected_err = explain_in_process(case, monkeypatch, host=real)
        expected_json = json.dumps(report) if report is not None else None
        expected_txt = render_scope_report(report) if report is not None and case.human else None
    run = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", "--json", *case.args,
                  cwd=proj, home=home, env=case.env)
    assert run.err == expected_err
    assert "Traceback" not in run.err
    if expected_json is None:
        assert (run.code, run.out) == (1, "")
    else:
        assert run.code == 0
        assert run.out.count("\n") == 1 and run.out.endswith("\n"), "exactly one JSON line"
        got = json.loads(run.out)
        assert got == json.loads(expected_json)
        # the key order is part of the contract (issue 2, item 7)
        assert list(got) == ["containment", "grants"]
        assert list(got["containment"]) == ["declared", "declared_source", "achieved", "floor_met", "reason", "mechanism",
                                        "network", "processes"]
        assert list(got["grants"]) == [
            "filesystem_scope", "network_allow", "unix_sockets", "shell_allow", "spawn_allow", "env_allow",
            "interpreter_runtime",
        ]
        if case.human:
            human = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", *case.args,
                            cwd=proj, home=home, env=case.env)
            assert (human.code, human.out, human.err) == (0, expected_txt, expected_err)
    # nothing created: no workdir, no lock, no store
    assert sorted(p.name for p in proj.iterdir()) == sorted(["murmur.yaml"] + ([".murmur"] if case.project_config else []))
