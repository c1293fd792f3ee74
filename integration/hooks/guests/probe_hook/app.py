"""Test hook (`hook` world) whose behaviour is picked by tokens in its name (MURMUR_HOOK_NAME).

Every call prints one JSON line {"probe": name, "event": fn, "data": {...}} to stdout, which the
runtime appends to logs/hook-<name>.log. Tokens:

  fail      on-tool-call returns err("probe asked to fail")
  trap      on-tool-call raises (the component traps)
  wrongarm  on-tool-call returns write-manifests (an arm on-tool-call does not honour)
  fs        on-session-start writes and reads ./probe-fs.txt and tries /etc/hostname; reports both
  net       on-session-start GETs $MURMUR_OTEL_ENDPOINT/probe-net; reports status or error
  env       on-session-start reports its whole environment
  reopen    on-task-end asks to reopen the task (first call only); `reopenall`: every call
  cfail     on-compaction returns err("probe refuses to compact")
  compact   on-compaction summarises the messages with run-inference and returns replace-context
  artifact  on-inference returns artifact('{"turn": N}')
  stage     on-stage returns write-manifests describing every shell-allow binary
  infer     on-session-start calls run-inference and reports the answer (or error)
  spin      on-session-start reports, then computes forever (only an interrupt or its deadline ends it)
"""

import dataclasses
import json
import os

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import inference, lifecycle, outbound

_state = {"task_end_calls": 0, "counter": 0}


def name():
    # Read at call time: componentize-py snapshots module-level code at build time.
    return os.environ.get("MURMUR_HOOK_NAME", "probe")


def on(token):
    return token in name().split("-")


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def report(event, **data):
    _state["counter"] += 1
    print(json.dumps({"probe": name(), "event": event, "n": _state["counter"], "data": data}), flush=True)


def none():
    return lifecycle.HookOutput_None_()


def _try(fn):
    try:
        return {"ok": fn()}
    except Err as err:
        return {"error": str(err.value)}
    except Exception as exc:  # noqa: BLE001 - the report is the point
        return {"error": f"{type(exc).__name__}: {exc}"}


def _fs():
    def write_read():
        with open("probe-fs.txt", "w") as fh:
            fh.write("written by " + name())
        with open("probe-fs.txt") as fh:
            return fh.read()

    def host_file():
        with open("/etc/hostname") as fh:
            return fh.read()

    return {"write": _try(write_read), "host": _try(host_file), "listing": _try(lambda: sorted(os.listdir(".")))}


def _net():
    url = os.environ.get("MURMUR_OTEL_ENDPOINT", "http://127.0.0.1:9") + "/probe-net"
    return _try(lambda: outbound.send(outbound.Request("GET", url, [], None, 5000)).status)


def _infer(text):
    req = inference.InferenceRequest([lifecycle.Message("user", text)], "be brief", None)
    return _try(lambda: (lambda r: {"text": r.text, "model": r.model_used, "in": r.input_tokens,
                                    "out": r.output_tokens})(inference.run_inference(req)))


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event):
        report("on-stage", **_plain(event))
        if on("stage"):
            manifests = [lifecycle.ToolManifest(b, f"name: {b}\nversion: 0.0.0\nruntime: tool\n"
                                                   f"implementation: native\ndescription: probe-described {b}\n")
                         for b in event.shell_allow]
            return lifecycle.HookOutput_WriteManifests(manifests)
        return none()

    def on_session_start(self, ctx):
        extra = {}
        if on("fs"):
            extra["fs"] = _fs()
        if on("net"):
            extra["net"] = _net()
        if on("env"):
            extra["env"] = dict(os.environ)
        if on("infer"):
            extra["infer"] = _infer("hello from " + name())
        report("on-session-start", ctx=_plain(ctx), **extra)
        while on("spin"):
            _state["counter"] += 1
        return none()

    def on_task_start(self, event):
        report("on-task-start", **_plain(event))
        return none()

    def on_inference(self, event):
        report("on-inference", **_plain(event))
        if on("artifact"):
            return lifecycle.HookOutput_Artifact(json.dumps({"turn": event.turn}))
        return none()

    def on_tool_call(self, event):
        report("on-tool-call", **_plain(event))
        if on("fail"):
            raise Err("probe asked to fail")
        if on("trap"):
            raise RuntimeError("probe trap")
        if on("wrongarm"):
            return lifecycle.HookOutput_WriteManifests([])
        return none()

    def on_shell(self, event):
        report("on-shell", **_plain(event))
        return none()

    def on_compaction(self, event):
        report("on-compaction", messages=len(event.messages), tokens=event.session_tokens,
               threshold=event.threshold, model=event.model, system_prompt=event.system_prompt)
        if on("cfail"):
            raise Err("probe refuses to compact")
        if on("compact"):
            transcript = "\n".join(f"{m.role}: {m.content}" for m in event.messages)
            resp = inference.run_inference(inference.InferenceRequest(
                [lifecycle.Message("user", "Summarise:\n" + transcript)], event.system_prompt, event.model))
            return lifecycle.HookOutput_ReplaceContext([lifecycle.Message("user", "Compacted: " + resp.text)])
        return none()

    def on_task_end(self, event):
        _state["task_end_calls"] += 1
        report("on-task-end", calls=_state["task_end_calls"], **_plain(event))
        if on("reopenall") or (on("reopen") and _state["task_end_calls"] == 1):
            return lifecycle.HookOutput_ReopenTask(f"attempt {_state['task_end_calls']} was not detailed enough")
        return none()

    def on_session_end(self, event):
        report("on-session-end", **_plain(event))
        return none()
