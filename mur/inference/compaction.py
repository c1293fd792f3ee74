"""Context compaction: when the conversation nears ``context.max_tokens``, replace it with a summary.

Enabled only when ``context.max_tokens`` is set. After every inference turn that continues the
session, the loop compares the turn's context occupancy — the provider-reported input tokens plus
the reply's output tokens, i.e. everything the next request will carry — with
``inference.compaction.threshold * context.max_tokens`` (threshold default 0.98); at or above it,
the compactor runs before the turn's tool calls are appended.

Who compacts is pluggable (:data:`Compactor`): a session with an ``on-compaction`` hook passes the
hook dispatch; otherwise :class:`ModelCompactor` asks the model itself for a summary, using
``inference.compaction.model`` (default: the session's model), ``inference.compaction.system_prompt``
(default :data:`mur.inference.prompts.DEFAULT_COMPACTION_PROMPT`) and the fixed 8192-token output cap
the spec prescribes for runtime-internal completions. The compacted context is one user message:
the original task followed by the summary. With ``inference.compaction.dump_summaries`` each
committed compaction appends ``{"turn","tokens_before","tokens_after","summary"}`` to
``out/compaction-summaries.jsonl``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from mur.fsafe import open_append
from mur.inference.messages import text_of, user_text, usage_of
from mur.inference.prompts import DEFAULT_COMPACTION_PROMPT

INTERNAL_MAX_TOKENS = 8192  # spec: runtime-internal completions always use the built-in default
SUMMARIES_FILE = "compaction-summaries.jsonl"
DEFAULT_THRESHOLD = 0.98


@dataclass
class CompactionRequest:
    """What a compactor is handed."""

    messages: list[dict[str, Any]]
    task: str
    turn: int
    tokens_before: int
    threshold: float
    context_max_tokens: int
    model: str | None  # inference.compaction.model (None: the compactor's default)
    system_prompt: str | None  # inference.compaction.system_prompt (None: the compactor's default)


@dataclass
class CompactionResult:
    """A replacement context (None: declined after all), and what producing it cost."""

    messages: list[dict[str, Any]] | None
    summary: str
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None  # set when the compactor made its own inference call


# A compactor returns None to decline (the session continues uncompacted) and raises MurError to
# fail the session (there is no fallback behind a compactor that broke).
Compactor = Callable[[CompactionRequest], "CompactionResult | None"]


class _Client(Protocol):
    def complete(self, request: dict) -> dict: ...


def should_compact(tokens: int, context_max_tokens: int | None, threshold: float | None) -> bool:
    """True when `tokens` reached threshold * context.max_tokens (compaction enabled only with a budget)."""
    if not context_max_tokens:
        return False
    limit = (DEFAULT_THRESHOLD if threshold is None else threshold) * context_max_tokens
    return tokens >= limit


def render_transcript(messages: list[dict[str, Any]]) -> str:
    """The conversation as plain text for a summariser."""
    lines: list[str] = []
    for message in messages:
        role = message.get("role", "?")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                lines.append(f"[{role}] {block.get('text', '')}")
            elif kind == "tool_use":
                lines.append(f"[{role} -> tool {block.get('name')}] {json.dumps(block.get('input', {}))}")
            elif kind == "tool_result":
                inner = block.get("content")
                text = inner if isinstance(inner, str) else text_of(inner or [])
                flag = " (error)" if block.get("is_error") else ""
                lines.append(f"[tool result{flag}] {text}")
    return "\n".join(lines)


def compacted_context(task: str, summary: str) -> list[dict[str, Any]]:
    """The replacement conversation: the task, then the summary of the work so far."""
    return [user_text(f"{task}\n\n[Earlier turns of this session were compacted. "
                      f"Summary of the work so far:]\n{summary}")]


class ModelCompactor:
    """The built-in compactor: the model summarises its own conversation."""

    def __init__(self, client: _Client, default_model: str):
        self.client = client
        self.default_model = default_model

    def __call__(self, request: CompactionRequest) -> CompactionResult | None:
        model = request.model or self.default_model
        response = self.client.complete({
            "model": model,
            "max_tokens": INTERNAL_MAX_TOKENS,
            "system": request.system_prompt if request.system_prompt is not None else DEFAULT_COMPACTION_PROMPT,
            "messages": [user_text("Summarise this agent conversation:\n\n" + render_transcript(request.messages))],
        })
        input_tokens, output_tokens = usage_of(response)
        summary = text_of(response.get("content") or [])
        if not summary.strip():  # nothing to commit, but the call was made and is accounted for
            return CompactionResult(None, "", input_tokens, output_tokens, model)
        return CompactionResult(compacted_context(request.task, summary), summary,
                                input_tokens, output_tokens, model)


def dump_summary(workdir: Path, turn: int, tokens_before: int, tokens_after: int, summary: str) -> None:
    """Append one committed compaction to out/compaction-summaries.jsonl (created on first use)."""
    out = Path(workdir) / "out"
    out.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"turn": turn, "tokens_before": tokens_before, "tokens_after": tokens_after,
                       "summary": summary}, ensure_ascii=False)
    fd = open_append(out / SUMMARIES_FILE)  # never through a link
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)
