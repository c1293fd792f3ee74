"""Test guest (hook world): proves the hook world links; on-session-start asks run-inference and
reports its answer (or error) as an `artifact` hook output; every other handler returns none."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import inference, lifecycle


class Lifecycle(exports.Lifecycle):
    def on_stage(self, event):
        return lifecycle.HookOutput_None_()

    def on_session_start(self, ctx):
        req = inference.InferenceRequest([lifecycle.Message("user", "hi " + ctx.capsule_name)], None, None)
        try:
            resp = inference.run_inference(req)
            payload = {"text": resp.text, "model": resp.model_used}
        except Err as err:
            payload = {"error": err.value}
        return lifecycle.HookOutput_Artifact(json.dumps(payload))

    def on_task_start(self, event):
        return lifecycle.HookOutput_None_()

    def on_inference(self, event):
        return lifecycle.HookOutput_None_()

    def on_tool_call(self, event):
        return lifecycle.HookOutput_None_()

    def on_shell(self, event):
        return lifecycle.HookOutput_None_()

    def on_compaction(self, event):
        return lifecycle.HookOutput_None_()

    def on_task_end(self, event):
        return lifecycle.HookOutput_None_()

    def on_session_end(self, event):
        return lifecycle.HookOutput_None_()
