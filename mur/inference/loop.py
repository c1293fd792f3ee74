"""The agent loop for ``transport: http``: model turns, tool dispatch, max_turns, compaction, reopening.

One *turn* is one inference call. Each turn the loop sends the conversation (Anthropic Messages
shape) with the model-visible tools; a ``tool_use`` reply has its calls dispatched through the
:class:`ToolBox` and the results appended, an ``end_turn`` / ``stop_sequence`` / ``max_tokens``
reply ends the session with its text as the result. After ``max_turns`` turns without an end the
session ends ``max_turns_reached``. Provider failures (``MurError`` from the client, after its
retries) end it ``failed`` with the provider's message — never an exception to the caller.

Trace events go through ``trace(dict)`` (the session's writer adds ``session_id`` / ``timestamp``):
``inference`` ``{turn, input_tokens, output_tokens, decision, tool_name}`` per turn (plus ``origin``
and ``model`` for the compactor's own call) and ``compaction`` ``{turn, tokens_before,
tokens_after}``; the ToolBox writes its own ``tool_call`` / ``shell`` events.

When ``workdir`` is given the loop writes ``out/result.txt`` (the result, or ``error: <message>``)
and, with ``dump_summaries``, ``out/compaction-summaries.jsonl``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from mur.errors import MurError
from mur.fsutil import atomic_write_text
from mur.inference.compaction import CompactionRequest, Compactor, dump_summary, should_compact
from mur.inference.messages import blocks_of, estimate_tokens, text_of, tool_result_block, tool_uses, user_text, usage_of
from mur.inference.prompts import ensure_notice
from mur.trace import events as ev

Trace = Callable[[dict[str, Any]], None]
END_STOPS = ("end_turn", "stop_sequence", "max_tokens")
# Upstream's words when the budget is reached and no on-compaction hook replaced the context.
NO_COMPACTION = "[compaction] threshold reached but no hook returned replace-context; continuing without compaction"


class ModelClient(Protocol):
    def complete(self, request: dict) -> dict:
        """Anthropic Messages request -> response (content, stop_reason, usage); MurError after retries."""
        ...


class ToolBox(Protocol):
    def specs(self) -> list[dict]:
        """Model-visible tools: [{"name", "description", "input_schema"}]."""
        ...

    def call(self, name: str, input: dict, turn: int) -> tuple[str, bool]:
        """Run one tool call -> (tool_result content, is_error); writes its own trace events."""
        ...


@dataclass
class LoopConfig:
    model: str
    max_turns: int = 10
    max_tokens: int = 8192  # inference.max_tokens: per-turn output cap
    system_prompt: str | None = None  # assembled by mur.inference.prompts (notice ensured anyway)
    context_max_tokens: int | None = None  # context.max_tokens: enables compaction
    compaction: Any | None = None  # mur.manifest.capsule.Compaction (threshold, model, dump_summaries)
    compaction_system_prompt: str | None = None  # resolved inline/file prompt
    max_task_reopens: int = 1
    # Asked between steps (before each turn, before a turn's tool calls): a reason string stops the
    # loop there (an accepted tasks/cancel); None carries on. A call in flight is never cut short.
    should_stop: Callable[[], str | None] | None = None
    # Hears the loop's progress (mur.session.stream.TaskStream: A2A frames): turn_started(turn),
    # replied(turn), tool_result(name, content, is_error), finished(text). None: nobody listens.
    events: Any = None
    log: Callable[[str], None] | None = None  # a line for logs/bootstrap.log (the compaction skip)


@dataclass
class LoopOutcome:
    exit_status: str  # "ok" | "failed" | "max_turns_reached"
    result: str
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    messages: list[dict] = field(default_factory=list)
    error: str | None = None
    error_code: str | None = None
    error_hint: str | None = None  # the failure's hint, for the user (what to check)
    compactions: int = 0
    stopped: bool = False  # ended by should_stop (a cancel): never reopened
    reopen_count: int = 0  # reopens granted before this outcome (run_reopenable_task; task_end's field)


def write_result(workdir: Path, text: str) -> None:
    """Atomically write out/result.txt in `workdir`."""
    atomic_write_text(Path(workdir) / "out" / "result.txt", text)


class _Run:
    """State of one loop run (kept out of the function body so each step stays small)."""

    def __init__(self, task: str, cfg: LoopConfig, client: ModelClient, tools: ToolBox, trace: Trace,
                 history: list[dict] | None, workdir: Path | None, compactor: Compactor | None):
        self.task, self.cfg, self.client, self.tools, self.trace = task, cfg, client, tools, trace
        self.workdir = workdir
        self.system = ensure_notice(cfg.system_prompt)
        self.specs = list(tools.specs())
        self.messages: list[dict] = list(history or []) + [user_text(task)]
        self.compactor = compactor  # None: nothing can compact (the spec leaves it to an on-compaction hook)
        self.outcome = LoopOutcome(exit_status="ok", result="")

    def request(self) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.cfg.model, "max_tokens": self.cfg.max_tokens,
                                   "system": self.system, "messages": self.messages}
        if self.specs:
            request["tools"] = self.specs
        return request

    def finish(self, status: str, result: str, error: MurError | None = None) -> LoopOutcome:
        out = self.outcome
        out.exit_status, out.result, out.messages = status, result, self.messages
        if error is not None:
            out.error, out.error_code, out.error_hint = error.message, error.code, error.hint
        if self.workdir is not None:
            write_result(self.workdir, result)
        return out

    def fail(self, error: MurError) -> LoopOutcome:
        return self.finish("failed", f"error: {error.message}", error)

    def compact(self, turn: int, tokens: int) -> None:
        comp = self.cfg.compaction
        threshold = getattr(comp, "threshold", None)
        if not should_compact(tokens, self.cfg.context_max_tokens, threshold):
            return
        result = None
        if self.compactor is not None:
            try:
                result = self._run_compactor(turn, tokens, threshold, comp)
            except MurError as err:  # no fallback behind a broken compactor: the session fails
                raise MurError(err.code, f"compaction failed: {err.message}", err.hint) from err
        if result is not None:
            self._commit(turn, tokens, result, comp)
        if result is None or result.messages is None:
            self._log(NO_COMPACTION)

    def _log(self, line: str) -> None:
        if self.cfg.log is not None:
            self.cfg.log(line)

    def _hear(self, what: str, *args: Any) -> None:
        listener = getattr(self.cfg.events, what, None) if self.cfg.events is not None else None
        if listener is not None:
            listener(*args)

    def _run_compactor(self, turn: int, tokens: int, threshold: float | None, comp: Any) -> Any:
        return self.compactor(CompactionRequest(
            messages=self.messages, task=self.task, turn=turn, tokens_before=tokens,
            threshold=threshold if threshold is not None else 0.98,
            context_max_tokens=self.cfg.context_max_tokens or 0,
            model=getattr(comp, "model", None), system_prompt=self.cfg.compaction_system_prompt,
        ))

    def _commit(self, turn: int, tokens: int, result: Any, comp: Any) -> None:
        if result.model is not None:  # the compactor's own inference call
            self.outcome.input_tokens += result.input_tokens
            self.outcome.output_tokens += result.output_tokens
            self.trace({"event_type": ev.INFERENCE, "turn": turn, "input_tokens": result.input_tokens,
                        "output_tokens": result.output_tokens, "decision": "end_turn", "tool_name": None,
                        "origin": "compaction", "model": result.model})
        if result.messages is None:
            return  # the compactor spent a call but declined to replace the context
        self.messages = list(result.messages)
        after = estimate_tokens({"system": self.system, "tools": self.specs, "messages": self.messages})
        self.outcome.compactions += 1
        self.trace({"event_type": ev.COMPACTION, "turn": turn, "tokens_before": tokens, "tokens_after": after})
        if getattr(comp, "dump_summaries", False) and self.workdir is not None:
            dump_summary(self.workdir, turn, tokens, after, result.summary)

    def stopped(self) -> LoopOutcome | None:
        reason = self.cfg.should_stop() if self.cfg.should_stop is not None else None
        if not reason:
            return None
        self.outcome.stopped = True
        return self.finish("failed", f"error: {reason}", MurError("E-RUN-007", reason))

    def dispatch(self, turn: int, content: list[dict]) -> None:
        results = []
        for call in tool_uses(content):
            name, args = str(call.get("name", "")), call.get("input") or {}
            try:
                text, is_error = self.tools.call(name, args if isinstance(args, dict) else {}, turn)
            except MurError as err:  # a refused/broken tool is the model's problem to handle
                text, is_error = err.render(), True
            self.outcome.tool_calls += 1
            self._hear("tool_result", name, text, is_error)
            results.append(tool_result_block(str(call.get("id", "")), text, is_error))
        self.messages.append({"role": "assistant", "content": content})
        self.messages.append({"role": "user", "content": results})

    def turn(self, turn: int) -> LoopOutcome | None:
        self._hear("turn_started", turn)
        response = self.client.complete(self.request())
        self._hear("replied", turn)
        input_tokens, output_tokens = usage_of(response)
        self.outcome.turns += 1
        self.outcome.input_tokens += input_tokens
        self.outcome.output_tokens += output_tokens
        stop = str(response.get("stop_reason") or "")
        content = blocks_of(response)
        calls = tool_uses(content)
        decision = "tool_call" if stop == "tool_use" else "end_turn" if stop in ("end_turn", "stop_sequence") else "text"
        self.trace({"event_type": ev.INFERENCE, "turn": turn, "input_tokens": input_tokens,
                    "output_tokens": output_tokens, "decision": decision,
                    "tool_name": calls[0].get("name") if calls else None})
        if stop == "tool_use":
            if not calls:
                return self.fail(MurError("E-RUN-007", "agent loop failed: stop_reason tool_use without tool_use blocks"))
            self.compact(turn, input_tokens + output_tokens)
            stopped = self.stopped()
            if stopped is not None:
                return stopped
            self.dispatch(turn, content)
            return None
        if stop in END_STOPS:
            self.messages.append({"role": "assistant", "content": content})
            self._hear("finished", text_of(content))
            return self.finish("ok", text_of(content))
        return self.fail(MurError("E-RUN-007", f"agent loop failed: unsupported stop_reason '{stop}'"))

    def run(self) -> LoopOutcome:
        for turn in range(self.cfg.max_turns):
            stopped = self.stopped()
            if stopped is not None:
                return stopped
            try:
                done = self.turn(turn)
            except MurError as err:
                return self.fail(err)
            except Exception as exc:  # noqa: BLE001 - a session ends failed, never with a traceback
                if getattr(exc, "ends_task", False):  # e.g. an input wait that timed out: the task is over
                    raise
                return self.fail(MurError("E-RUN-007", f"agent loop failed: {type(exc).__name__}: {exc}"))
            if done is not None:
                return done
        return self.finish("max_turns_reached", f"error: inference loop exceeded {self.cfg.max_turns} turns")


def run_agent_loop(task: str, cfg: LoopConfig, client: ModelClient, tools: ToolBox, trace: Trace,
                   history: list[dict] | None = None, workdir: Path | None = None, *,
                   compactor: Compactor | None = None) -> LoopOutcome:
    """Run one attempt of a task to its end: ok, failed or max_turns_reached (never raises MurError).

    `history` is a threaded conversation's earlier messages; `compactor` replaces the built-in
    model summariser (e.g. an on-compaction hook dispatch).
    """
    return _Run(task, cfg, client, tools, trace, history, workdir, compactor).run()


# -- task reopening (on-task-end hooks) --------------------------------------------------------


@dataclass
class TaskOutcome:
    exit_status: str  # ok | failed | max_turns_reached | reopen_budget_exhausted
    last: LoopOutcome
    attempts: list[LoopOutcome]
    reopen_count: int

    @property
    def turns(self) -> int:
        return sum(a.turns for a in self.attempts)

    @property
    def input_tokens(self) -> int:
        return sum(a.input_tokens for a in self.attempts)

    @property
    def output_tokens(self) -> int:
        return sum(a.output_tokens for a in self.attempts)

    @property
    def tool_calls(self) -> int:
        return sum(a.tool_calls for a in self.attempts)


def build_reopen_task(original: str, feedback: list[tuple[str, str]]) -> str:
    """The reopened task: the original text, then every reopen's feedback so far, by hook."""
    text = original.rstrip() + (
        "\n\n---\n\n# Reopen feedback\n\nThe previous attempt was not accepted. "
        "Address the feedback below, then continue.\n"
    )
    for number, (hook, reason) in enumerate(feedback, start=1):
        text += f"\n## Reopen {number} (from hook `{hook}`)\n\n{reason.strip()}\n"
    return text


def run_task_with_reopens(task: str, *, max_turns: int, max_task_reopens: int,
                          attempt: Callable[[str, int], LoopOutcome],
                          on_task_end: Callable[[LoopOutcome], tuple[str, str] | None] | None,
                          trace: Trace, task_id: str = "") -> TaskOutcome:
    """Run `attempt(task_text, turns_left)` until no on-task-end hook asks to reopen it.

    `on_task_end` returns ``(hook_name, reason)`` to reopen. A reopen is granted while fewer than
    `max_task_reopens` were used and turns remain under `max_turns` (reopening never grants turns);
    otherwise the task ends ``reopen_budget_exhausted``. Each granted reopen writes a
    ``task_reopened`` event and re-runs with the original task plus all feedback so far.
    """
    attempts: list[LoopOutcome] = []
    feedback: list[tuple[str, str]] = []
    text = task
    while True:
        used = sum(a.turns for a in attempts)
        outcome = attempt(text, max(max_turns - used, 0))
        attempts.append(outcome)
        if outcome.stopped:
            return TaskOutcome(outcome.exit_status, outcome, attempts, len(feedback))
        wish = on_task_end(outcome) if on_task_end else None
        if wish is None:
            return TaskOutcome(outcome.exit_status, outcome, attempts, len(feedback))
        used = sum(a.turns for a in attempts)
        if len(feedback) >= max_task_reopens or used >= max_turns:
            return TaskOutcome("reopen_budget_exhausted", outcome, attempts, len(feedback))
        feedback.append(wish)
        trace({"event_type": ev.TASK_REOPENED, "task_id": task_id, "hook_name": wish[0],
               "reason": wish[1], "reopen_number": len(feedback)})
        text = build_reopen_task(task, feedback)


def run_reopenable_task(task: str, cfg: LoopConfig, client: ModelClient, tools: ToolBox, trace: Trace,
                        history: list[dict] | None = None, workdir: Path | None = None, *,
                        compactor: Compactor | None = None,
                        on_task_end: Callable[[LoopOutcome], tuple[str, str] | None] | None = None,
                        task_id: str = "") -> LoopOutcome:
    """`run_agent_loop` attempts under `run_task_with_reopens`, folded into one LoopOutcome.

    The caller supplies the decisions (a session passes its hooks' compactor and on-task-end);
    the totals are the attempts' sums, the text and messages the last attempt's. An exhausted
    reopen budget is E-RUN-007, naming both budgets.
    """

    def attempt(text: str, turns_left: int) -> LoopOutcome:
        return run_agent_loop(text, dataclasses.replace(cfg, max_turns=turns_left), client, tools, trace,
                              history, workdir, compactor=compactor)

    out = run_task_with_reopens(task, max_turns=cfg.max_turns, max_task_reopens=cfg.max_task_reopens,
                                attempt=attempt, on_task_end=on_task_end, trace=trace, task_id=task_id)
    last = out.last
    combined = LoopOutcome(
        exit_status=out.exit_status, result=last.result, turns=out.turns, input_tokens=out.input_tokens,
        output_tokens=out.output_tokens, tool_calls=out.tool_calls, messages=last.messages, error=last.error,
        error_code=last.error_code, error_hint=last.error_hint, compactions=sum(a.compactions for a in out.attempts),
        reopen_count=out.reopen_count,
    )
    if out.exit_status == "reopen_budget_exhausted":
        combined.error_code, combined.error_hint = "E-RUN-007", None
        combined.error = (f"agent loop failed: a hook asked to reopen the task again after {out.reopen_count} "
                          f"reopen(s) (inference.max_task_reopens: {cfg.max_task_reopens}, inference.max_turns: "
                          f"{cfg.max_turns})")
    return combined
