"""An agent task's stream frames (mur.session.stream) in upstream's order, driven by the real loop."""

from __future__ import annotations

from mur.inference.loop import LoopConfig, run_agent_loop
from mur.session.stream import TaskStream


class Context:
    def __init__(self):
        self.frames = []

    def emit(self, event, data):
        self.frames.append((event, data))


class Client:
    """A scripted model whose second reply is streamed in chunks by `stream`."""

    def __init__(self, stream):
        self.stream, self.turn = stream, 0

    def complete(self, request):
        self.turn += 1
        if self.turn == 1:
            return {"content": [{"type": "tool_use", "id": "c1", "name": "echo", "input": {}}],
                    "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}
        for part in ("Hel", "lo"):
            self.stream.on_chunk("text", part)
        return {"content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}


class Tools:
    def specs(self):
        return [{"name": "echo", "description": "", "input_schema": {"type": "object"}}]

    def call(self, name, tool_input, turn):
        return '{"status":"passed"}', False


def test_working_frames_tool_artifacts_chunks_and_the_cursor_removal_in_order():
    context = Context()
    stream = TaskStream(context)
    outcome = run_agent_loop("task", LoopConfig(model="m", events=stream), Client(stream), Tools(), lambda e: None)
    assert outcome.result == "Hello"
    assert context.frames == [
        ("status", {"state": "working", "message": "inference turn 1"}),
        ("artifact", {"tool_name": "echo", "content": '{"status":"passed"}'}),
        ("status", {"state": "working", "message": "inference turn 2"}),
        ("text", {"text": "Hel", "final": False}),
        ("text", {"text": "lo", "final": False}),
        ("text", {"text": "", "final": True}),  # streamed: only the cursor removal, no repeat of the answer
    ]


def test_a_turn_without_chunks_sends_the_whole_answer_once():
    context = Context()
    stream = TaskStream(context)
    stream.turn_started(0)
    stream.on_chunk("thinking", "hmm")  # thinking chunks are not the answer
    stream.replied(0)
    stream.finished("the full response text")
    assert context.frames[1:] == [("thinking", {"text": "hmm", "final": False}),
                                  ("text", {"text": "the full response text", "final": True})]
    silent = TaskStream(object())  # a context without emit (no A2A): nothing to send, nothing breaks
    silent.turn_started(0)
    silent.finished("x")


def test_a_huge_tool_result_is_cut_in_its_frame():
    from mur.session.stream import ARTIFACT_LIMIT

    context = Context()
    TaskStream(context).tool_result("cat", "é" * ARTIFACT_LIMIT, False)
    [(kind, frame)] = context.frames
    assert kind == "artifact" and len(frame["content"].encode()) < ARTIFACT_LIMIT + 200
    assert frame["content"].endswith(f"[cut: {2 * ARTIFACT_LIMIT} bytes in all; the model got the whole result]")
