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


@pytest.mark.requires_landlock
@pytest.mark.parametrize("name", CLI_CASES)
def test_case_through_the_cli(name, project, monkeypatch):
    """The same case through the real `mur` binary and the real kernel probe: the report and the
    warnings or error the in-process path computes from this host's probe (so any host checks the
    CLI, a container without namespaces as well as a host that reaches sealed), one JSON line in
    the golden's key order, and the golden's host-independent values."""
    from mur.sandbox.probe import probe_host

    case = load_case(name)
    home, proj = project
    _setup(case, home, proj)
    run = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", "--json", *case.args,
                  cwd=proj, home=home, env=case.env)
    monkeypatch.chdir(proj)
    here, here_err = explain_in_process(case, monkeypatch, host=probe_host())
    expected_json = case.expected(".json")
    assert run.err == here_err
    assert "Traceback" not in run.err
    if here is None:
        assert (run.code, run.out) == (1, "")
    else:
        assert run.code == 0
        assert run.out.count("\n") == 1 and run.out.endswith("\n"), "exactly one JSON line"
        got = json.loads(run.out)
        assert got == here
        if expected_json is not None:
            # the key order is part of the contract (issue 2 item 7, issue 28 item 10: the flat
            # session_start.effective_grants shape), and so is every host-independent value
            order = [k for k in json.loads(expected_json) if k != "shortfall_reason"]  # present only when unmet
            assert [k for k in got if k != "shortfall_reason"] == order
            host_keys = {"achieved_containment", "floor_met", "shortfall_reason", "enforcement_tier",
                         "sealed_blocker", "network_isolation", "process_isolation", "host_view",
                         "host_view_reason", "disk_ceiling", "disk_ceiling_inodes", "disk_ceiling_reason"}
            assert {k: v for k, v in got.items() if k not in host_keys} == \
                {k: v for k, v in json.loads(expected_json).items() if k not in host_keys}
        if case.human:
            human = run_mur("run", "--manifest", "murmur.yaml", "--explain-scope", *case.args,
                            cwd=proj, home=home, env=case.env)
            assert (human.code, human.err) == (0, here_err)
            assert human.out == render_scope_report(here)
    # nothing created: no workdir, no lock, no store
    assert sorted(p.name for p in proj.iterdir()) == sorted(["murmur.yaml"] + ([".murmur"] if case.project_config else []))
