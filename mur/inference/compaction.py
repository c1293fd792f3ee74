"""Context compaction: when the conversation nears ``context.max_tokens``, an on-compaction hook may
replace it.

The spec's rules (and upstream v0.2): compaction is enabled only when ``context.max_tokens`` is set;
*who* compacts is the hook bound to ``on-compaction`` (or subscribed to it with commit policy
``replace-context``) — the runtime makes no summarising call of its own. After every inference turn
that continues the session, the loop compares the turn's context occupancy — the provider-reported
input tokens plus the reply's output tokens, i.e. everything the next request will carry — with
``inference.compaction.threshold * context.max_tokens`` (threshold default 0.98); at or above it the
:data:`Compactor` (the session's hook dispatch, mur.hooks.hookset) is handed the conversation, the
token count, the threshold and ``inference.compaction.model`` / ``.system_prompt`` verbatim (None
stays None: picking a default is the hook's job). A ``replace-context`` answer becomes the new
context (a ``compaction`` trace event; with ``dump_summaries`` a line in
``out/compaction-summaries.jsonl``); no hook, or none answering ``replace-context``, leaves the
context as it is and logs upstream's line to ``logs/bootstrap.log``; a hook that fails fails the
session (there is no fallback behind it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.fsafe import open_append

INTERNAL_MAX_TOKENS = 8192  # spec: runtime-internal completions (a hook's run-inference) use the built-in default
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


def should_compact(tokens: int, context_max_tokens: int | None, threshold: float | None) -> bool:
    """True when `tokens` reached threshold * context.max_tokens (compaction enabled only with a budget)."""
    if not context_max_tokens:
        return False
    limit = (DEFAULT_THRESHOLD if threshold is None else threshold) * context_max_tokens
    return tokens >= limit


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
