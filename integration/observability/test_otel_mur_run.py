"""A real `mur run` session (examples/hello on wasmtime): its trace exported to a real receiver, and shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.otel.exporter import OtelExporter
from mur.trace.reader import load_events


def mur(*args: str, cwd: Path, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # Share the wasmtime compile cache of the machine: a clean HOME would recompile every component.
    env.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
    env.update({"HOME": str(home), "MURMUR_A2A_TIMEOUT_SECS": "5"})
    return subprocess.run([sys.executable, "-m", "mur", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_real_session_trace_exports_and_shows(hello: Path, home: Path, receiver):
    run = mur("run", "--task", "Ada", cwd=hello, home=home)
    assert run.returncode == 0, run.stderr
    [session] = sorted((hello / "workdir").iterdir())
    events = load_events(session / "trace.jsonl")

    rx = receiver()
    exporter = OtelExporter(rx.url, service_name="hello", service_version="0.1.0",
                            log_path=session / "logs" / "otel.log", timeout=5.0)
    for event in events:
        exporter.on_event(event)
    assert exporter.export() == 2
    spans = rx.received()["spans"]
    root = next(s for s in spans if s["name"] == "capsule.session")
    tool = next(s for s in spans if s["name"] == "capsule.tool_call")
    assert tool["parent_span_id"] == root["span_id"] and {s["trace_id"] for s in spans} == {session.name[4:]}
    assert root["attributes"]["exit_status"] == "ok" and root["attributes"]["murmur.session_id"] == session.name
    assert tool["attributes"]["tool_name"] == "greet" and tool["attributes"]["status"] == "ok"
    assert root["resource"]["service.name"] == "hello"

    shown = mur("trace", "show", "--json", cwd=hello, home=home)
    assert shown.returncode == 0, shown.stderr
    [line] = shown.stdout.splitlines()
    doc = json.loads(line)
    assert doc["session_id"] == session.name and doc["status"] == "ok"
    assert [r["event_type"] for r in doc["timeline"]] == [e["event_type"] for e in events]
    human = mur("trace", "show", session.name[-6:], cwd=hello, home=home)
    assert human.returncode == 0 and "greet" in human.stdout and "── Timeline " in human.stdout


@pytest.mark.slow
def test_mur_run_exports_to_observability_otel_endpoint(hello: Path, home: Path, receiver):
    rx = receiver()
    manifest = hello / "murmur.yaml"
    manifest.write_text(manifest.read_text() + f"\nobservability:\n  otel_endpoint: {rx.url}\n")
    run = mur("run", "--task", "Ada", cwd=hello, home=home)
    assert run.returncode == 0, run.stderr
    [session] = sorted((hello / "workdir").iterdir())
    got = rx.received()
    assert got["requests"] == 1
    names = sorted(s["name"] for s in got["spans"])
    assert names == ["capsule.session", "capsule.tool_call"]
    assert {s["trace_id"] for s in got["spans"]} == {session.name[4:]}
    assert {s["resource"]["service.name"] for s in got["spans"]} == {"hello"}
    assert "exported 2 span(s)" in (session / "logs" / "otel.log").read_text()
    assert (session / "trace.jsonl").stat().st_size > 0
