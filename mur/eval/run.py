"""`mur eval run`: a capsule run once per dataset case, each session scored by murmur-hook-eval.

Dataset: JSON lines `{"case_id": str, "task_path": str, "expected"?: any}` (blank lines skipped;
`expected` is kept but unused, as upstream). `task_path` is relative to the dataset file's directory.
A line that is not such an object, an empty `case_id` or a repeated one is E-EVAL-001
(`<dataset>:<line>: ...`, the code upstream uses for dataset lines); no case at all is E-IO-003.

Everything is checked before the first case runs: the dataset, the capsule's eval declarations (a
`murmur-hook-eval` hook artifact with a filesystem grant, `observability.eval.scorers`: E-MAN-001),
every `mur run` pre-check (mur.session.prechecks: artifacts, driver, containment floor; murmur.lock is
created or verified here, once per dataset, as upstream), and that each case directory is fresh.

Each case then runs as `mur run --json --workdir <root>/<case>` in a subprocess — the exact `mur run`
path, one case at a time (so murmur.lock is never written concurrently) — with MURMUR_CASE_ID and
MURMUR_DATASET_ID (observability.eval.dataset_id, else the dataset file's stem) in its environment;
mur.hooks.launch forwards both to the hook. The case's task file is copied to `<case dir>/task.md`
first (missing: a warning, and the case runs with an empty task). The result is the `overall` of the
eval.jsonl the hook wrote (mur.eval.file): `pass`, `fail`, or `no_scores` (also when no
file was written). A session that failed still has its eval.jsonl (`exit_ok` fails), so it is a `fail`
result, not an error; a case whose `mur run` ended before a session existed (no startup JSON line) is
`stage_failed`, with the error line it printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.jsonl import BadLine, read_records

HOOK_NAME = "murmur-hook-eval"
EVAL_FILE = "eval.jsonl"
SUMMARY_RULE = "─" * 38
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DATASET_HINT = 'each line is a JSON object {"case_id": "...", "task_path": "...", "expected"?: ...}'


@dataclass(frozen=True)
class Case:
    """One dataset line: its id, the task file it names (resolved), and where it was written."""

    case_id: str
    task_ref: str  # task_path as written ("" = no task)
    task_path: Path | None  # resolved against the dataset's directory; None when task_ref is empty
    line: int
    expected: Any = None


@dataclass
class CaseResult:
    """What one case produced: `pass|fail|no_scores` (the eval.jsonl overall) or `stage_failed`."""

    case_id: str
    result: str
    workdir: Path
    session_id: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # stage_failed: the error line `mur run` printed

    def as_json(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "result": self.result, "session_id": self.session_id,
                "workdir": str(self.workdir), "scores": self.scores}


@dataclass
class EvalRun:
    """A dataset's run: where it came from, its dataset id, and one result per case (in dataset order)."""

    dataset: Path
    dataset_id: str
    workdir_root: Path
    cases: list[CaseResult] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.result == "pass")

    def as_json(self) -> dict[str, Any]:
        """`mur eval run --json`: {"dataset", "dataset_id", "cases": [...], "pass", "total"}."""
        return {"dataset": str(self.dataset), "dataset_id": self.dataset_id,
                "cases": [c.as_json() for c in self.cases], "pass": self.passed, "total": len(self.cases)}


# --- validation (nothing runs) -------------------------------------------------------------------


def read_dataset(path: Path) -> list[Case]:
    """The dataset's cases in file order; E-IO-001/003 for the file, E-EVAL-001 for a bad line."""
    path = Path(path)
    try:
        records = read_records(path, strict_utf8=True)
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"dataset not found at {path}") from exc
    except IsADirectoryError as exc:
        raise MurError("E-IO-003", f"dataset {path} is a directory, not a JSONL file", _DATASET_HINT) from exc
    except UnicodeDecodeError as exc:
        raise MurError("E-IO-003", f"dataset {path} is not UTF-8 text", _DATASET_HINT) from exc
    except BadLine as exc:
        raise MurError("E-EVAL-001", str(exc), _DATASET_HINT) from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read dataset {path}: {exc.strerror or exc}") from exc
    base = path.resolve().parent
    cases: list[Case] = []
    first_line: dict[str, int] = {}
    for number, record in records:
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise MurError("E-EVAL-001", f"{where}: a dataset line must be a JSON object", _DATASET_HINT)
        case_id = record.get("case_id")
        if not isinstance(case_id, str) or not case_id.strip():
            raise MurError("E-EVAL-001", f"{where}: missing or empty 'case_id' (a non-empty string)", _DATASET_HINT)
        task_ref = record.get("task_path")
        if not isinstance(task_ref, str):
            raise MurError("E-EVAL-001", f"{where}: missing 'task_path' (a string: a path relative to the "
                           "dataset file)", _DATASET_HINT)
        if case_id in first_line:
            raise MurError("E-EVAL-001", f"{where}: duplicate case_id '{case_id}' (first on line "
                           f"{first_line[case_id]})", "give every case its own case_id")
        first_line[case_id] = number
        task_path = base / task_ref if task_ref.strip() else None
        cases.append(Case(case_id, task_ref, task_path, number, record.get("expected")))
    if not cases:
        raise MurError("E-IO-003", f"dataset is empty: {path}", _DATASET_HINT)
    return cases


def eval_scope(loaded: Any) -> str:
    """The directory (relative to the case's workdir) murmur-hook-eval writes eval.jsonl into.

    E-MAN-001 unless the capsule declares the hook with a filesystem grant and at least one scorer:
    without them no case could ever be scored."""
    capsule = loaded.capsule
    where = "murmur.yaml"
    index = next((i for i, a in enumerate(capsule.artifacts) if a.name == HOOK_NAME and a.runtime == "hook"), None)
    if index is None:
        raise MurError(
            "E-MAN-001",
            f"{where}: mur eval run needs a '{HOOK_NAME}' artifact with runtime: hook (it writes the scores)",
            f"add to artifacts: {{name: {HOOK_NAME}, version: \"1.0.0\", runtime: hook, "
            "capabilities: {filesystem: {scope: .}}} (docs/hooks.md)",
        )
    evaluation = capsule.observability.eval
    if evaluation is None or not evaluation.scorers:
        raise MurError(
            "E-MAN-001",
            f"{where}: missing required field 'observability.eval.scorers' (mur eval run scores each case with them)",
            "declare at least one scorer, e.g. observability: {eval: {scorers: [{type: exit_ok, name: success}]}}",
        )
    grant = loaded.grants.get(HOOK_NAME)
    if grant is None or grant.preopen != "scope" or not grant.scope:
        raise MurError(
            "E-MAN-001",
            f"{where}: missing required field 'artifacts[{index}].capabilities.filesystem.scope' "
            f"({HOOK_NAME} needs a directory for eval.jsonl; hooks are default-deny)",
            "grant it one: capabilities: {filesystem: {scope: .}} on its artifact entry",
        )
    return grant.scope


def dataset_id_for(loaded: Any, dataset: Path) -> str:
    """observability.eval.dataset_id, else the dataset file's stem."""
    evaluation = loaded.capsule.observability.eval
    configured = (evaluation.dataset_id or "").strip() if evaluation is not None else ""
    return configured or Path(dataset).stem


def default_root(capsule_dir: Path, now: float | None = None) -> Path:
    """`<capsule dir>/workdir/eval-<UTC timestamp>`, suffixed -2, -3... when taken."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    base = Path(capsule_dir) / "workdir" / f"eval-{stamp}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def case_dirs(root: Path, cases: list[Case]) -> list[Path]:
    """One directory per case under `root`, named after its case_id (made file-name safe, unique)."""
    out: list[Path] = []
    taken: set[str] = set()
    for case in cases:
        name = _UNSAFE.sub("_", case.case_id).strip(".")[:80] or "case"
        unique, n = name, 1
        while unique.lower() in taken:
            n += 1
            unique = f"{name}-{n}"
        taken.add(unique.lower())
        out.append(Path(root) / unique)
    return out


def check_fresh(dirs: list[Path]) -> None:
    """E-IO-003 when a case directory already holds files (a reused --workdir-root would mix runs)."""
    for path in dirs:
        try:
            used = path.exists() and (not path.is_dir() or any(path.iterdir()))
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot read case workdir {path}: {exc.strerror or exc}") from exc
        if used:
            raise MurError("E-IO-003", f"case workdir {path} already exists and is not empty",
                           "pass a fresh --workdir-root (the default is a new workdir/eval-<timestamp>)")


# --- running ---------------------------------------------------------------------------------------


def run_command(manifest: Path, case_dir: Path) -> list[str]:
    """The `mur run` a case is: one task (the case's task.md), then exit."""
    return [sys.executable, "-m", "mur", "run", "--json", "--manifest", str(manifest), "--workdir", str(case_dir),
            "--lifecycle-task-acceptance", "single", "--lifecycle-after-task", "exit"]


def _error_line(stderr: str, returncode: int) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error[")]
    if errors:
        return errors[-1]
    return lines[-1] if lines else f"mur run exited with status {returncode}"


def _startup(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        try:
            info = json.loads(line)
        except ValueError:
            continue
        if isinstance(info, dict) and isinstance(info.get("session_id"), str):
            return info
    return None


def read_case_eval(case_dir: Path, session_dir: Path | None, scope: str,
                   note: Callable[[str], None]) -> tuple[str, dict[str, float]]:
    """(overall, dataset_run scores) from the eval.jsonl the hook wrote; `no_scores` when there is none."""
    from mur.eval.file import load_eval, summarize

    candidates = [case_dir / scope / EVAL_FILE]
    if session_dir is not None:
        candidates.append(session_dir / EVAL_FILE)
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        note(f"    warning: no {EVAL_FILE} was written (see logs/hook-{HOOK_NAME}.log in the session workdir)")
        return "no_scores", {}
    try:
        scores, run = load_eval(path)
    except MurError as exc:
        note(f"    warning: {exc.render()}")
        return "no_scores", {}
    raw = run.get("scores", {}) if run is not None else {}
    values = {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return summarize(scores, run)["overall"], dict(sorted(values.items()))


def run_case(manifest: Path, case: Case, case_dir: Path, scope: str, env: dict[str, str],
             note: Callable[[str], None]) -> CaseResult:
    """Run one case as a `mur run` subprocess and read its score."""
    from mur.fsafe import Tree

    try:  # the case directory becomes a tools' workdir (and may be one from an earlier run): no link followed
        text = b""
        if case.task_path is not None and case.task_path.is_file():
            text = case.task_path.read_bytes()
        elif case.task_path is not None:
            note(f"    warning: task_path '{case.task_ref}' not found ({case.task_path}); "
                 "running the case with an empty task")
        with Tree(case_dir, create=True) as tree:
            tree.write_bytes("task.md", text)
    except OSError as exc:
        error = f"error[E-IO-003]: cannot prepare case workdir {case_dir}: {exc.strerror or exc}"
        return CaseResult(case.case_id, "stage_failed", case_dir, error=error)
    proc = subprocess.run(run_command(manifest, case_dir), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, encoding="utf-8", errors="replace")
    info = _startup(proc.stdout)
    if info is None:
        return CaseResult(case.case_id, "stage_failed", case_dir, error=_error_line(proc.stderr, proc.returncode))
    if proc.returncode != 0:
        note(f"    session failed: {_error_line(proc.stderr, proc.returncode)}")
    session_dir = Path(info["workdir"]) if isinstance(info.get("workdir"), str) else None
    overall, scores = read_case_eval(case_dir, session_dir, scope, note)
    return CaseResult(case.case_id, overall, case_dir, info["session_id"], scores)


def run_eval(capsule: Path, dataset: Path, workdir_root: Path | None = None, *,
             on_start: Callable[[int], None] = lambda count: None,
             on_case: Callable[[Case], None] = lambda case: None,
             on_result: Callable[[CaseResult], None] = lambda result: None,
             note: Callable[[str], None] = lambda text: None) -> EvalRun:
    """Validate everything, then run each case in order; MurError only for what stops the whole run."""
    from mur.errors import set_warning_sink
    from mur.manifest import load_capsule
    from mur.session.options import RunOptions
    from mur.paths import manifest_path
    from mur.session.prechecks import load_env_file, prepare

    manifest = manifest_path(capsule).absolute()
    dataset = Path(dataset).absolute()
    cases = read_dataset(dataset)
    if not manifest.is_file():
        raise MurError("E-IO-001", f"manifest not found: {manifest}",
                       "pass the capsule directory holding murmur.yaml as CAPSULE_DIR (default: .)")
    load_env_file(manifest)
    # A quiet first parse for the eval checks; prepare() parses again and prints the manifest warnings once.
    previous = set_warning_sink(lambda code, message: None)
    try:
        loaded = load_capsule(manifest)
    finally:
        set_warning_sink(previous)
    scope = eval_scope(loaded)
    dataset_id = dataset_id_for(loaded, dataset)
    root = (Path(workdir_root) if workdir_root is not None else default_root(manifest.parent)).absolute()
    dirs = case_dirs(root, cases)
    check_fresh(dirs)
    prepare(RunOptions(manifest=manifest))  # every `mur run` pre-check; creates or verifies murmur.lock
    env = {**os.environ, "MURMUR_DATASET_ID": dataset_id}
    run = EvalRun(dataset, dataset_id, root)
    on_start(len(cases))
    for case, case_dir in zip(cases, dirs):
        on_case(case)
        result = run_case(manifest, case, case_dir, scope, {**env, "MURMUR_CASE_ID": case.case_id}, note)
        run.cases.append(result)
        on_result(result)
    return run


# --- rendering -------------------------------------------------------------------------------------


def render_start(count: int) -> str:
    return f"Running {count} case(s) …"


def render_case_start(case: Case) -> str:
    return f"  case: {case.case_id}"


def render_case_result(result: CaseResult) -> str:
    """`    result: <pass|fail|no_scores>  session: <id>` (upstream), or `stage_failed` alone."""
    if result.session_id is None:
        return f"    result: {result.result}"
    return f"    result: {result.result}  session: {result.session_id}"


def render_summary(run: EvalRun) -> str:
    """The `── Summary ──` block: `pass: X/N`, then one row per case with its scores and workdir."""
    out = ["", f"── Summary {SUMMARY_RULE}", f"pass: {run.passed}/{len(run.cases)}", ""]
    for case in run.cases:
        scores = " ".join(f"{name}={value:.2f}" for name, value in sorted(case.scores.items()))
        out.append(f"  {case.case_id:<24} {case.result}  {scores}  ({case.workdir})")  # upstream's row, scores or not
    return "\n".join(out) + "\n"
