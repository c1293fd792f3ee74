"""A hook artifact's behavioural contract: `binding`, `execution_mode`, `commit_policy`.

These three keys live in the hook artifact's *own* murmur.yaml (staged at
`tools/<name>/murmur.yaml`); its capability grant does not (that comes from the capsule manifest,
mur.manifest.grants). They are checked once, at staging, with upstream's rules (murmur-artifact's
`parse_hook_config_from_yaml`, v0.2.0 surface = murmur:hook@0.5.0):

* `binding` — one lifecycle function name; absent = every session event except on-stage.
* `execution_mode` — `blocking` (default) or `async`.
* `commit_policy` — `none` (default), `replace-context`, `write-manifests`, `reopen-task`.
* async requires `commit_policy: none` (nothing waits for an async hook's answer);
  `on-stage` must be blocking;
* a declared binding admits `none` plus the one policy it can commit (on-stage: write-manifests,
  on-compaction: replace-context, on-task-end: reopen-task); an absent binding admits any policy.

A violation is E-MAN-003 naming the file and the rule, before any hook component is instantiated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mur.errors import MurError

# The lifecycle functions, in the order a session reaches them (WIT names).
EVENTS = ("on-stage", "on-session-start", "on-task-start", "on-inference", "on-tool-call", "on-shell",
          "on-compaction", "on-task-end", "on-session-end")
ALL = "all"  # what an absent `binding:` means
MODES = ("blocking", "async")
POLICIES = ("none", "replace-context", "write-manifests", "reopen-task")

# The one non-`none` hook-output arm each handler commits (upstream's HONORED_OUTPUT_ARM table).
HONORED_ARM: dict[str, str | None] = {
    "on-stage": "write-manifests",
    "on-session-start": None,
    "on-task-start": None,
    "on-inference": "artifact",
    "on-tool-call": None,
    "on-shell": None,
    "on-compaction": "replace-context",
    "on-task-end": "reopen-task",
    "on-session-end": None,
}

# The commit_policy a declared binding can honour (`artifact` has no commit_policy spelling).
POLICY_FOR_BINDING = {"on-stage": "write-manifests", "on-compaction": "replace-context",
                      "on-task-end": "reopen-task"}


@dataclass(frozen=True)
class HookConfig:
    binding: str = ALL
    execution_mode: str = "blocking"
    commit_policy: str = "none"

    @property
    def is_async(self) -> bool:
        return self.execution_mode == "async"

    def receives(self, event: str) -> bool:
        """Is this hook dispatched for lifecycle function `event`? (`all` excludes on-stage.)"""
        if self.binding == ALL:
            return event != "on-stage"
        return self.binding == event


def _string(root: dict, key: str, allowed: tuple[str, ...], where: str) -> str | None:
    if key not in root or root[key] is None:
        return None
    value = root[key]
    if not isinstance(value, str) or value not in allowed:
        shown = value if isinstance(value, str) else type(value).__name__
        raise MurError(
            "E-MAN-003",
            f"{where}: unknown {key} '{shown}'; expected: {', '.join(allowed)}",
            "fix the hook artifact's own murmur.yaml (docs/hooks.md)",
        )
    return value


def parse_hook_config(root: Any, where: str = "murmur.yaml") -> HookConfig:
    """Validate the hook contract keys of an artifact manifest mapping (E-MAN-003 on violation)."""
    if not isinstance(root, dict):
        raise MurError("E-MAN-003", f"{where}: a hook artifact manifest must be a mapping")
    binding = _string(root, "binding", EVENTS, where) or ALL
    mode = _string(root, "execution_mode", MODES, where) or "blocking"
    policy = _string(root, "commit_policy", POLICIES, where) or "none"
    hint = "fix the hook artifact's own murmur.yaml (docs/hooks.md)"
    if mode == "async" and policy != "none":
        raise MurError(
            "E-MAN-003",
            f"{where}: async-with-commit not supported: execution_mode 'async' requires commit_policy 'none' "
            f"(got '{policy}')",
            hint,
        )
    if binding == "on-stage" and mode == "async":
        raise MurError(
            "E-MAN-003",
            f"{where}: on-stage hooks must be blocking; execution_mode 'async' is not valid for binding 'on-stage'",
            hint,
        )
    if binding != ALL and policy != "none" and POLICY_FOR_BINDING.get(binding) != policy:
        note = " (on-inference commits an 'artifact' output, which has no commit_policy spelling)" \
            if binding == "on-inference" else ""
        raise MurError(
            "E-MAN-003",
            f"{where}: commit_policy '{policy}' is not valid for binding '{binding}'; binding '{binding}' "
            f"honors commit_policy '{POLICY_FOR_BINDING.get(binding, 'none')}'{note}",
            hint,
        )
    return HookConfig(binding, mode, policy)


def read_hook_config(manifest: Path, label: str | None = None) -> HookConfig:
    """Read and validate a staged hook's murmur.yaml (E-IO-001 / E-MAN-002 / E-MAN-003)."""
    import yaml

    from mur.fsafe import Tree

    where = label or str(manifest)
    manifest = Path(manifest)
    try:  # staged into the tools' workdir: read without following a link
        with Tree(manifest.parent) as tree:
            text = tree.read_text(manifest.name)
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"hook manifest not found: {manifest}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read hook manifest {manifest}: {exc.strerror or exc}") from exc
    try:
        root = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MurError("E-MAN-002", f"{where}: {exc}") from exc
    return parse_hook_config(root, where)


def classify_output(event: str, tag: str | None) -> str:
    """'ignore' (the `none` arm), 'honored' (this event's committed arm) or 'fault'."""
    if tag is None or tag == "none":
        return "ignore"
    return "honored" if HONORED_ARM.get(event) == tag else "fault"
