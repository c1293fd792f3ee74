"""The import graph of mur/: packages import downwards only (no cycle between them), and mur.testing
(OTLP receiver, model server, A2A harness) stays out of the product's graph."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

MUR = Path(__file__).resolve().parents[1] / "mur"


@functools.lru_cache(maxsize=None)
def imported_modules(path: Path) -> frozenset[str]:
    """Every module an `import` / `from ... import` anywhere in the file names (lazy imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` of a submodule is `import pkg.sub` (the package's __init__ runs
            # either way): an edge to the submodule only; any other name is the package's own
            subs = {a.name for a in node.names if _is_module(f"{node.module}.{a.name}")}
            if len(subs) < len(node.names):
                names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _is_module(dotted: str) -> bool:
    """A mur module or package of that dotted name exists in the tree."""
    if not dotted.startswith("mur."):
        return False
    base = MUR.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def package_of(module: str) -> str:
    """mur.session.runner -> mur.session; mur.errors -> mur.errors (a leaf module is its own unit)."""
    return ".".join(module.split(".")[:2])


@functools.lru_cache(maxsize=None)
def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in MUR.rglob("*.py"):
        module = ".".join(path.relative_to(MUR.parent).with_suffix("").parts).removesuffix(".__init__")
        source = package_of(module)
        targets = {package_of(name) for name in imported_modules(path) if name.startswith("mur.")}
        graph.setdefault(source, set()).update(targets - {source, "mur"})
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_packages():
    assert cycles(package_graph()) == []


def module_graph() -> dict[str, set[str]]:
    """Module -> the mur modules it imports (anywhere in the file: lazy and TYPE_CHECKING imports too)."""
    modules = {".".join(path.relative_to(MUR.parent).with_suffix("").parts).removesuffix(".__init__"): path
               for path in MUR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_modules(path):
            parts = name.split(".")
            known = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)
            if known is not None and known != module:
                targets.add(known)
        graph[module] = targets
    return graph


def test_no_import_cycle_between_modules():
    assert cycles(module_graph()) == []


def test_nothing_below_the_cli_imports_it():
    assert sorted(p for p, targets in package_graph().items() if "mur.cli" in targets and p != "mur.__main__") == []


def test_images_and_exports_take_the_shipped_capsule_not_deploy():
    """`mur image` and `mur export` package what mur.resolve.shipped makes; nothing of theirs imports
    mur.deploy (issue 30: one shipped capsule for deploy, image and export)."""
    graph = package_graph()
    assert "mur.deploy" not in graph["mur.image"] and "mur.deploy" not in graph["mur.export"]
    assert "mur.resolve" in graph["mur.image"] and "mur.resolve" in graph["mur.export"]


def test_the_docker_engine_sits_below_image_export_and_deploy():
    """mur.engine (the one docker SDK adapter) is used by mur.image, mur.export and mur.deploy and
    imports none of them: each side's error codes are chosen inside it, from one classification."""
    graph = package_graph()
    assert graph["mur.engine"] <= {"mur.errors"}
    assert all("mur.engine" in graph[p] for p in ("mur.image", "mur.export", "mur.deploy"))


def test_no_product_module_imports_mur_testing():
    offenders = []
    for path in sorted(MUR.rglob("*.py")):
        if path.is_relative_to(MUR / "testing"):
            continue
        if any(name == "mur.testing" or name.startswith("mur.testing.") for name in imported_modules(path)):
            offenders.append(str(path.relative_to(MUR.parent)))
    assert offenders == []


def test_the_cli_and_the_run_path_never_load_mur_testing():
    probe = (
        "import sys\n"
        "from mur.cli import main\n"
        "main.build_app(lazy=False)\n"  # every command module, as the lazy group would load them
        "import mur.session.runner, mur.session.executor, mur.session.hookwiring, mur.a2a.lifecycle\n"
        "import mur.otel.exporter, mur.eval.run, mur.trace.timeline, mur.hooks.launch, mur.inference.loop\n"
        "print(sorted(m for m in sys.modules if m == 'mur.testing' or m.startswith('mur.testing.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# What `mur --help` (answered from the command table) must not import: typer and click alone cost
# about twice a bare interpreter's start-up; the rest are the command bodies' libraries.
NOT_FOR_HELP = ("typer", "click", "rich", "pydantic", "yaml", "wasmtime", "httpx", "opentelemetry", "docker",
                "paramiko", "starlette", "uvicorn")


def test_mur_help_imports_no_cli_framework_and_no_command():
    probe = (
        "import sys\n"
        "from mur.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {NOT_FOR_HELP!r}), file=sys.stderr)\n"
        "print(sorted(m for m in sys.modules if m.startswith('mur.')), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    heavy, ours = out.stderr.strip().splitlines()[-2:]
    assert heavy == "[]"
    assert ours == str(["mur.cli", "mur.cli.commands", "mur.cli.main", "mur.cli.roothelp"])


def test_a_run_that_reads_the_probe_cache_imports_no_prober(tmp_path):
    probe = (
        "import sys\n"
        "from mur.sandbox.probe import probe_host\n"
        "probe_host()\n"  # measures (or reads) and fills the cache
        "for m in [m for m in sys.modules if m.startswith('mur.sandbox.') and m not in "
        "('mur.sandbox.probe', 'mur.sandbox.probecache')]:\n"
        "    del sys.modules[m]\n"
        "import mur.sandbox.probe as p\n"
        "p._cache = None\n"
        "p.probe_host()\n"
        "print(sorted(m for m in sys.modules if m.startswith('mur.sandbox.')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUR_CACHE_DIR", "MUR_PROBE_CACHE")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True,
                         env={**env, "HOME": str(tmp_path)})
    assert out.stdout.strip() == str(["mur.sandbox.probe", "mur.sandbox.probecache"])
