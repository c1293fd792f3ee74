"""Undo beside each step, and a command's phase as an enum guarded at the door.

Kamal's boot is the model: start the new version; if that fails, stop it and re-raise. Each step
of a command pushes its own undo the moment it succeeded (`Attempt.push`), so a new step cannot
forget its undo and an interrupted command knows exactly what to reverse: the stack, newest first.
httpx's client state is the model for the phase: every method of a command states which phases it
may start from (`Attempt.at`), and a call in any other phase is a bug raised at once, not a
half-done deploy.

The undo runs within a budget (MUR_DEPLOY_UNDO_BUDGET): one Ctrl-C ends the command within a few
seconds. What could not be undone in time (or at all: the link is gone, a second Ctrl-C) is
returned, newest first, for the `incomplete` record that says what is left.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable

from mur.errors import MurError


class Phase(enum.Enum):
    """Where one mutating command on one deployment is (in this order)."""

    OPENED = "opened"  # connected; nothing of this command on the target yet
    LOCKED = "locked"  # the deployment's lock is held
    CHECKED = "checked"  # preflight passed (the runtime is in the target's cache)
    RECORDED = "recorded"  # the local record says a command is under way
    STAGED = "staged"  # the new release is complete on the target (not serving)
    SMOKED = "smoked"  # the new release answered on a spare port
    SWITCHED = "switched"  # `current` names the new release
    STARTED = "started"  # the service was restarted from `current`
    DONE = "done"  # finished and recorded
    UNDONE = "undone"  # failed and undone: the target is as before
    LEFT = "left"  # failed, and not everything could be undone: the record says what is left


@dataclass
class UndoStep:
    label: str
    fn: Callable[[], None]


class Attempt:
    """One command's phase and the undo of every step that succeeded."""

    def __init__(self, name: str, phase: Phase = Phase.OPENED):
        self.name = name
        self.phase = phase
        self._stack: list[UndoStep] = []
        self.deadline = 0.0  # while undoing: when the budget ends (steps may bound their waits by it)

    def at(self, *allowed: Phase) -> None:
        """The door: raise when a step is called from a phase it does not follow."""
        if self.phase not in allowed:
            wanted = ", ".join(p.value for p in allowed)
            raise MurError("E-INTERNAL", f"{self.name}: a step for phase {wanted} was called in phase {self.phase.value}")

    def advance(self, phase: Phase) -> None:
        self.phase = phase

    def push(self, label: str, fn: Callable[[], None]) -> None:
        """`fn` reverses the step that just succeeded (it must be safe to run once, late)."""
        self._stack.append(UndoStep(label, fn))

    def remaining(self) -> float:
        """Seconds left of the undo budget (0 outside an undo)."""
        return max(0.0, self.deadline - time.monotonic())

    def pending(self) -> list[str]:
        return [s.label for s in reversed(self._stack)]

    def forget(self) -> None:
        """The command finished: nothing to undo any more."""
        self._stack.clear()

    def undo(self, budget: float, on_step: Callable[[str], None] | None = None) -> list[str]:
        """Run the undo steps newest first until done or `budget` seconds passed; returns the
        labels of those not done (a step that fails, or a second Ctrl-C, stops the undo there)."""
        deadline = self.deadline = time.monotonic() + budget
        while self._stack:
            step = self._stack[-1]
            if time.monotonic() > deadline:
                break
            if on_step:
                on_step(step.label)
            try:
                step.fn()
            except (MurError, OSError):
                break  # the link is gone or the target refuses: the rest stays for the record
            self._stack.pop()
        left = self.pending()
        self.phase = Phase.LEFT if left else Phase.UNDONE
        return left
