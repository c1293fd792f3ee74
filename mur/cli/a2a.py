"""``mur send``, ``mur watch`` and ``mur cancel``: talk to a running capsule over A2A."""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    @app.command("send")
    def send(
        url: str = typer.Argument(..., help="Capsule URL, as `mur run` prints it (localhost:<port>)."),
        text: str = typer.Argument(..., help="The task text (or the reply to a task waiting for input)."),
        context: str = typer.Option(None, "--context", help="contextId to continue a threaded conversation."),
        json_out: bool = typer.Option(False, "--json", help="Print the final task as one JSON line."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for the task to finish (0: forever)."),
    ) -> None:
        """Send a task to a capsule and print its result."""
        from mur.a2a.client import send_task, task_text
        from mur.cli.render import emit_json, note
        from mur.errors import MurError

        task = send_task(url, text, context_id=context, timeout=timeout or None)
        state = task.get("status", {}).get("state")
        if json_out:
            emit_json(task)
            if state in ("failed", "rejected"):
                raise typer.Exit(1)
            return
        if state == "completed":
            answer = task_text(task)
            sys.stdout.write(answer if answer.endswith("\n") or not answer else answer + "\n")
            sys.stdout.flush()
            return
        if state == "input-required":
            sys.stdout.write(f"input required: {task_text(task)}\n")
            sys.stdout.flush()
            note(f'  reply with: mur send {url} "<answer>"   (task {task.get("id")})')
            return
        raise MurError("E-A2A-001", f"task {task.get('id')} {state}: {task_text(task) or 'no message'}")

    @app.command("cancel")
    def cancel(
        url: str = typer.Argument(..., help="Capsule URL, as `mur run` prints it (localhost:<port>)."),
        task_id: str = typer.Argument(..., metavar="TASK_ID", help="The task id (tsk_...) message/send returned."),
        json_out: bool = typer.Option(False, "--json", help="Print the task as one JSON line."),
    ) -> None:
        """Cancel a task: queued, waiting for input, or (agent capsules) running, at its next step."""
        from mur.a2a.client import A2AClient
        from mur.cli.render import emit_json

        with A2AClient(url) as client:
            task = client.cancel_task(task_id)
        state = task.get("status", {}).get("state")
        if json_out:
            emit_json(task)
        elif state == "working":  # accepted for a running task: it stops at its next step boundary
            print(f"{task.get('id')} canceling (it stops before its next step)")
        else:
            print(f"{task.get('id')} {state}")

    @app.command("watch")
    def watch(
        url: str = typer.Argument(..., help="Capsule URL, as `mur run` prints it (localhost:<port>)."),
        task: str = typer.Option(None, "--task", help="Only this task's events; exit when it ends."),
    ) -> None:
        """Follow a capsule's event stream (stream/watch) until it closes."""
        from mur.a2a.client import A2AClient
        from mur.a2a.render import WatchRenderer

        renderer = WatchRenderer()
        with A2AClient(url) as client:
            for event in client.watch(task_id=task):
                shown = renderer.render(event.event, event.data)
                if shown.stdout:
                    sys.stdout.write(shown.stdout)
                    sys.stdout.flush()
                for line in shown.stderr:
                    print(line, file=sys.stderr, flush=True)
