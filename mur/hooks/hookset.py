"""The session's hooks at run time: dispatch, decisions, async workers, run-inference.

Built by mur.hooks.launch.build_hooks (read mur/hooks/__init__.py first). Blocking hooks are called
inline in manifest declaration order; an async hook has a worker thread with a bounded queue. A
hook's Err, trap or unsupported arm is appended to its log and traced as `hook_dispatch_error`,
never raised — except at on-compaction, where it fails the session (upstream's rule).

The agent loop is not imported here: the session hands `compactor()` and `on_task_end` to it
(mur.inference.loop.run_reopenable_task), so the loop calls hooks, never the reverse.
"""


from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.hooks.config import HookConfig, classify_output
from mur.hooks.instance import MISSING, HookInstance, HookLog
from mur.hooks.records import (
    compaction_fields,
    lifecycle_call,
    manifests_of,
    messages_of,
    output_of,
    stage_fields,
    to_record,
)
from mur.inference.compaction import INTERNAL_MAX_TOKENS, CompactionRequest, CompactionResult
from mur.trace import events as ev

QUEUE_DEPTH = 1024  # upstream's ASYNC_HOOK_QUEUE_DEPTH
DRAIN_TIMEOUT = 15.0  # upstream's ASYNC_HOOK_DRAIN_TIMEOUT, shared by every async hook
NO_INFERENCE = "no inference driver is configured for this capsule"
_STOP = object()

Emit = Callable[[dict[str, Any]], None]
OnManifest = Callable[[str, dict[str, Any]], None]  # (binary, parsed murmur.yaml) an on-stage hook wrote


@dataclass
class Hook:
    name: str
    config: HookConfig
    instance: HookInstance
    log: HookLog
    worker: "Worker | None" = None


@dataclass
class CallResult:
    tag: str | None = None  # the honoured arm, when one was returned
    payload: Any = None
    error: str | None = None


class Worker:
    """One async hook's thread: calls run one at a time, in dispatch order."""

    def __init__(self, hookset: "HookSet", hook: Hook, depth: int):
        self.hookset = hookset
        self.hook = hook
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.dropped = 0
        self.abandoned = False  # set when the drain budget ran out: the rest is not run
        self.thread = threading.Thread(target=self._run, name=f"hook-{hook.name}", daemon=True)
        self.thread.start()

    def submit(self, fn: str, fields: dict[str, Any]) -> bool:
        try:
            self.queue.put_nowait((fn, fields))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _run(self) -> None:
        while not self.abandoned:
            try:
                job = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if job is _STOP:
                return
            fn, fields = job
            self.hookset._call(self.hook, fn, fields)  # honoured arms of async hooks are discarded

    def stop(self, deadline: float) -> bool:
        """Finish what is queued; False when the budget ran out first."""
        try:
            self.queue.put(_STOP, timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Full:
            self.abandoned = True
            return False
        self.thread.join(max(deadline - time.monotonic(), 0.0))
        if self.thread.is_alive():
            self.abandoned = True
            return False
        return True


class HookSet:
    """The session's hooks, in manifest declaration order."""

    def __init__(self, hooks: list[Hook], *, emit: Emit, tools_dir: Path | None = None,
                 model_client: Any = None, default_model: str | None = None,
                 on_artifact: Callable[[str, str], None] | None = None,
                 queue_depth: int = QUEUE_DEPTH, drain_timeout: float = DRAIN_TIMEOUT,
                 on_manifest: OnManifest | None = None):
        self.hooks: list[Hook] = []
        self.emit = emit
        self.tools_dir = tools_dir
        self.model_client = model_client
        self.default_model = default_model
        self.on_artifact = on_artifact
        self.drain_timeout = drain_timeout
        self.queue_depth = queue_depth
        self.on_manifest = on_manifest
        self.turn = 0
        self.current_task: str | None = None
        self._task_end_done: set[str] = set()
        self._staging = False
        self._closed = False
        self._lock = threading.RLock()
        for hook in hooks:
            self.add(hook)

    def add(self, hook: Hook) -> None:
        """Append a hook (declaration order); an async one gets its worker thread now."""
        if hook.config.is_async and hook.worker is None:
            hook.worker = Worker(self, hook, self.queue_depth)
        self.hooks.append(hook)

    # --- calling one hook ---------------------------------------------------------------------

    def _trace(self, event: dict[str, Any]) -> None:
        try:
            self.emit(event)
        except Exception:  # noqa: BLE001 - a closed or failing trace must not break hook dispatch
            pass

    def _fault(self, hook: Hook, fn: str, arm: str, message: str, traced: bool = True) -> None:
        hook.log.line(message)
        if traced:
            self._trace({"event_type": ev.HOOK_DISPATCH_ERROR, "hook_name": hook.name, "event": fn, "arm": arm})

    def _call(self, hook: Hook, fn: str, fields: dict[str, Any], traced: bool = True) -> CallResult:
        """One lifecycle call; errors and unsupported arms are logged (+ traced), never raised."""
        try:
            value = hook.instance.call(fn, to_record(fields))
        except MurError as err:
            self._fault(hook, fn, "error", f"{fn}: {err.message}", traced)
            return CallResult(error=err.message)
        except Exception as exc:  # noqa: BLE001 - e.g. a record the component refused; never kill a worker
            message = f"hook '{hook.name}' {fn} could not be called: {type(exc).__name__}: {exc}"
            self._fault(hook, fn, "error", message, traced)
            return CallResult(error=message)
        if value is MISSING:
            return CallResult()
        tag, payload, error = output_of(value)
        if error is not None:
            self._fault(hook, fn, "error", f"hook '{hook.name}' {fn} returned an error: {error}", traced)
            return CallResult(error=error)
        verdict = classify_output(fn, tag)
        if verdict == "fault":
            self._fault(hook, fn, str(tag), f"hook '{hook.name}' returned unsupported hook-output arm '{tag}' "
                                            f"from '{fn}'; this event does not honor that arm, so the value was "
                                            "discarded", traced)
            return CallResult()
        if verdict == "ignore":
            return CallResult()
        return CallResult(tag, payload)

    def _dispatch(self, fn: str, fields: dict[str, Any]) -> list[tuple[Hook, CallResult]]:
        """Blocking hooks inline (results returned, in order); async hooks enqueued."""
        results = []
        with self._lock:
            for hook in self.hooks:
                if not hook.config.receives(fn):
                    continue
                if hook.worker is not None:
                    if not hook.worker.submit(fn, fields):
                        self._fault(hook, fn, "queue-overflow",
                                    f"hook '{hook.name}' {fn}: its queue is full; the event was dropped")
                    continue
                results.append((hook, self._call(hook, fn, fields)))
        return results

    # --- the trace listener -------------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """Trace listener: dispatch the lifecycle call a trace event maps to."""
        if self._closed:
            return
        call = lifecycle_call(event)
        if call is None:
            return
        fn, fields = call
        kind = event.get("event_type")
        if kind == ev.TASK_START:
            self.current_task = fields["task-id"]
        elif kind == ev.INFERENCE:
            self.turn = fields["turn"]
        elif kind == ev.TASK_END:
            task = fields["task-id"]
            if task in self._task_end_done:  # on_task_end() already ran on-task-end for this task
                self._task_end_done.discard(task)
                return
        for hook, result in self._dispatch(fn, fields):
            if result.tag == "artifact" and self.on_artifact is not None:
                try:
                    self.on_artifact(hook.name, str(result.payload))
                except Exception:  # noqa: BLE001 - a stream consumer must not break dispatch
                    pass
            elif result.tag == "reopen-task":
                hook.log.line(f"hook '{hook.name}' asked to reopen task '{fields.get('task-id')}', but this task "
                              "did not run through the agent loop's reopen path; the request was ignored")

    # --- decisions ----------------------------------------------------------------------------

    def compactor(self) -> Callable[[CompactionRequest], CompactionResult | None] | None:
        """A compactor for run_agent_loop when a blocking hook can commit replace-context."""
        if not any(not h.config.is_async and h.config.receives("on-compaction")
                   and (h.config.binding == "on-compaction" or h.config.commit_policy == "replace-context")
                   for h in self.hooks):
            return None
        return self._compact

    def _compact(self, request: CompactionRequest) -> CompactionResult | None:
        fields = compaction_fields(request.messages, request.tokens_before, request.threshold, request.model,
                                   request.system_prompt)
        results = self._dispatch("on-compaction", fields)
        for hook, result in results:
            if result.error is not None:
                raise MurError("E-RUN-007", f"on-compaction hook '{hook.name}' failed: {result.error}",
                               f"see logs/hook-{hook.name}.log")
        for hook, result in results:
            if result.tag == "replace-context":
                messages = messages_of(result.payload)
                bad = [m["role"] for m in messages if m["role"] not in ("user", "assistant")]
                if not messages or bad:
                    why = f"message role '{bad[0]}'" if bad else "an empty message list"
                    raise MurError("E-RUN-007", f"on-compaction hook '{hook.name}' returned replace-context with {why}")
                context = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in messages]
                return CompactionResult(context, "\n\n".join(m["content"] for m in messages))
        return None

    def on_task_end(self, outcome: Any) -> tuple[str, str] | None:
        """on-task-end for one finished attempt; (hook_name, reason) of the first reopen-task."""
        task = self.current_task or ""
        self._task_end_done.add(task)
        fields = {"task-id": task, "exit-status": str(getattr(outcome, "exit_status", "failed"))}
        for hook, result in self._dispatch("on-task-end", fields):
            if result.tag == "reopen-task":
                return hook.name, str(result.payload or "")
        return None

    def on_stage(self, shell_allow: list[str]) -> list[tuple[str, str]]:
        """Run on-stage hooks; write the manifests they return for allow-listed binaries."""
        written: list[tuple[str, str]] = []
        self._staging = True
        try:
            for hook in self.hooks:
                if hook.config.binding != "on-stage" or hook.worker is not None:
                    continue
                result = self._call(hook, "on-stage", stage_fields(shell_allow), traced=False)
                if result.tag != "write-manifests":
                    continue
                for binary, content in manifests_of(result.payload):
                    if self._write_manifest(hook, binary, content, shell_allow):
                        written.append((binary, content))
        finally:
            self._staging = False
        return written

    def _write_manifest(self, hook: Hook, binary: str, content: str, shell_allow: list[str]) -> bool:
        import yaml

        if binary not in shell_allow:
            hook.log.line(f"hook '{hook.name}' on-stage: manifest for '{binary}' ignored: only binaries in "
                          "capabilities.shell.allow can be described")
            return False
        try:
            parsed = yaml.safe_load(content)
        except yaml.YAMLError as exc:
            hook.log.line(f"hook '{hook.name}' on-stage: manifest for '{binary}' is not valid YAML: {exc}")
            return False
        if self.tools_dir is None:
            return False
        from mur.fsafe import Tree

        try:  # tools/ is in the tools' workdir: written by rename, never through a link
            with Tree(self.tools_dir, create=True) as tools:
                tools.write_text(f"{binary}/murmur.yaml", content)
        except OSError as exc:
            hook.log.line(f"hook '{hook.name}' on-stage: failed to write manifest for {binary}: {exc}")
            return False
        if self.on_manifest is not None and isinstance(parsed, dict):
            self.on_manifest(binary, parsed)
        return True

    # --- host imports of one hook -------------------------------------------------------------

    def http_recorder(self, name: str) -> Callable[[dict], None]:
        """The `on_http` of hook `name`'s guest config: a denied request is traced as network_denied."""

        def record(info: dict) -> None:
            if not info.get("allowed", True):
                self._trace({"event_type": ev.NETWORK_DENIED, "turn": self.turn, "artifact": name,
                             "url": info.get("url"), "method": info.get("method"),
                             "reason": info.get("error") or "not in this hook's capabilities.network.allow"})

        return record

    # --- run-inference for hooks --------------------------------------------------------------

    def inference_for(self, name: str) -> Callable[[Any], Any]:
        """The `murmur:runtime/inference.run-inference` host function of hook `name`."""

        def run_inference(request: Any) -> Any:
            if self._staging:
                return "run-inference is not available during on-stage"
            if self.model_client is None:
                return NO_INFERENCE
            messages = [{"role": str(getattr(m, "role", "")), "content": str(getattr(m, "content", ""))}
                        for m in getattr(request, "messages", []) or []]
            model = getattr(request, "model", None) or self.default_model
            system = getattr(request, "system-prompt", None)
            body: dict[str, Any] = {"model": model, "max_tokens": INTERNAL_MAX_TOKENS, "messages": messages}
            if system is not None:
                body["system"] = system
            event = {"event_type": ev.INFERENCE, "turn": self.turn, "tool_name": None, "origin": f"hook:{name}"}
            try:
                response = self.model_client.complete(body)
            except MurError as err:
                self._trace({**event, "input_tokens": 0, "output_tokens": 0, "decision": "error", "model": model,
                             "error": err.message})
                return err.message
            from mur.inference.messages import text_of, usage_of

            input_tokens, output_tokens = usage_of(response)
            used = str(response.get("model") or model or "")
            self._trace({**event, "input_tokens": input_tokens, "output_tokens": output_tokens,
                         "decision": "end_turn", "model": used})
            return {"text": text_of(response.get("content") or []), "model_used": used,
                    "input_tokens": input_tokens, "output_tokens": output_tokens}

        return run_inference

    # --- teardown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Drain async queues (one shared budget), then release every instance. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + self.drain_timeout
        stuck: set[str] = set()
        for hook in self.hooks:
            worker = hook.worker
            if worker is None:
                continue
            if worker.dropped:
                hook.log.line(f"hook '{hook.name}' discarded {worker.dropped} lifecycle event(s): its queue was full")
            if not worker.stop(deadline):
                stuck.add(hook.name)
                self._fault(hook, "drain", "timeout",
                            f"hook '{hook.name}' did not finish its queued lifecycle calls within the "
                            f"{self.drain_timeout:g}s session-end drain budget; the remaining calls were abandoned")
        for hook in self.hooks:
            if hook.name not in stuck:  # a stuck worker still holds its instance; leave it to exit
                hook.instance.close()
