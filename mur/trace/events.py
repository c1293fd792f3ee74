"""The event types of trace.jsonl (reference/upstream.md 3.3): the one place they are spelled.

Every line carries `event_type`, `session_id` and `timestamp` (Unix ms); the fields of each type
are in docs/observability.md. Writers (session, agent loop, A2A service, sandbox, hooks) and
readers (the views beside this module, OTel export, hook dispatch) use these names, never literals.
"""

from __future__ import annotations

SESSION_START = "session_start"
SESSION_END = "session_end"
TASK_START = "task_start"
TASK_END = "task_end"
TASK_REOPENED = "task_reopened"
A2A_TASK_RECEIVED = "a2a_task_received"
INFERENCE = "inference"
TOOL_CALL = "tool_call"
SKILL_CALL = "skill_call"
SHELL = "shell"
COMPACTION = "compaction"
NETWORK_DENIED = "network_denied"
HOOK_DISPATCH_ERROR = "hook_dispatch_error"
A2A_SEND = "a2a_send"  # a capsule's murmur:message/send reached a peer (upstream's event)

