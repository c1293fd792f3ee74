"""Errors and warnings, and the one catalogue of every diagnostic code mur uses.

Library code raises ``MurError`` and never prints or exits; ``mur.cli`` renders it once as::

    error[CODE]: message
      hint: ...

on stderr and exits 1. Warnings go through ``warn()``, which hands them to the current sink
(stderr by default, a list in tests).

Codes come from ../shared/spec/manifest-schema.md and upstream's catalogue
(reference/upstream.md section 2). Codes marked "(mur)" are this implementation's own, added for
behaviour upstream does not have; each is documented here and in docs/errors.md.
"""

from __future__ import annotations

import sys
from typing import Callable

CATALOGUE: dict[str, str] = {
    # build
    "E-BLD-001": "invalid artifact name or identity fields in an artifact murmur.yaml",
    "E-BLD-002": "unsafe, missing or colliding requires_files entry",
    "E-BLD-003": "artifact payload missing or ambiguous (wasm artifact without exactly one root .wasm)",
    "E-BLD-010": "(mur) building a Python guest component with componentize-py failed",
    # capabilities / containment
    "E-CAP-001": "invalid capabilities.network.allow entry",
    "E-CAP-002": "invalid filesystem scope (absolute or escaping the workdir)",
    "E-CAP-003": "declared containment floor is not achievable on this host",
    "E-CAP-005": "host cannot enforce network.allow for the shell subprocess tree",
    # config
    "E-CFG-002": "unsupported config key",
    "E-CFG-003": "(mur) config file is not valid YAML or has a wrong type",
    # deploy
    "E-DEPLOY-001": "bad deploy arguments (no target, a `--host` that is no SSH address, bad --env)",
    "E-DEPLOY-003": "SSH / transfer failure talking to the target",
    "E-DEPLOY-004": "the capsule did not start on the target (no startup JSON / service failed)",
    "E-DEPLOY-006": "the pinned mur runtime could not be obtained or verified",
    "E-DEPLOY-007": "(mur) target preflight failed (kernel, cgroups, disk, runtime mismatch)",
    "E-DEPLOY-008": "(mur) unknown or ambiguous deployment id; a `mur send/watch/cancel` target that is no "
                    "deployment, capsule name or URL (a bare word: a capsule's URL has a port)",
    "E-DEPLOY-009": "(mur) SSH host key unknown or changed",
    "E-DEPLOY-010": "(mur) Docker engine unavailable or container operation failed",
    "E-DEPLOY-011": "(mur) nothing to roll back to",
    "E-DEPLOY-012": "(mur) --image / --image-archive: absent, not a mur capsule image, or not this manifest's",
    "E-DEPLOY-013": "(mur) another command holds the deployment's lock on the target (the holder is named)",
    "E-DEPLOY-014": "(mur) no space left on the target (the filesystem and the bytes needed are named)",
    # export (Kubernetes manifests)
    "E-EXP-001": "(mur) the capsule cannot be exported as asked (bad --image or output directory)",
    # fleets (deploy.yaml: several targets, rolling deploys)
    "E-FLEET-001": "(mur) the fleet file (deploy.yaml) is invalid, or a secrets file it names is readable by others",
    "E-FLEET-002": "(mur) --only / --host selects no target of the fleet",
    "E-FLEET-003": "(mur) no deployment of that name answers (mur send NAME)",
    "E-FLEET-004": "(mur) another command is rolling the same fleet (the fleet lock)",
    "E-FLEET-005": "(mur) fleet preflight failed on a target: nothing was changed anywhere",
    "E-FLEET-006": "(mur) a rollout stopped at a failing target; the targets it switched went back",
    # images
    "E-IMG-001": "(mur) Docker engine unavailable, or an image build / load / tag failed",
    "E-IMG-002": "(mur) the image registry refused a push or pull (credentials, read-only, unreachable)",
    "E-IMG-003": "(mur) image not in the engine, or an image archive is missing or not loadable",
    "E-IMG-004": "(mur) invalid image reference, or one that names no registry for a push",
    # provisioning and local VMs
    "E-PROV-001": "(mur) host prepare refused: unsupported distribution, architecture or init system",
    "E-PROV-002": "(mur) host prepare failed (no root, a change failed, the host did not come back)",
    "E-VM-001": "(mur) VM image build failed or cannot run here (tools, root, mirror)",
    "E-VM-002": "(mur) VM boot failed, or no such VM",
    # io
    "E-IO-001": "file not found (manifest, source, HOME, ...)",
    "E-IO-002": "permission denied on the host",
    "E-IO-003": "general I/O failure, malformed state file, registry error",
    # manifest
    "E-MAN-001": "murmur.yaml: missing required field",
    "E-MAN-002": "murmur.yaml: YAML syntax error",
    "E-MAN-003": "murmur.yaml: wrong type, bad value or broken rule",
    # registry
    "E-REG-001": "artifact not found in any store or registry",
    "E-REG-002": "artifact integrity check failed (sha256 mismatch)",
    "E-REG-003": "artifact name@version already exists",
    "E-REG-004": "reserved version (latest, stable, edge) cannot be published",
    "E-REG-005": "registry-resolved artifact disagrees with murmur.lock",
    # run
    "E-RUN-001": "guest trapped, failed to compile, or hit a limit (deadline, memory, table)",
    "E-RUN-002": "guest imports something the host does not provide",
    "E-RUN-003": "murmur.lock problem (missing entry, version mismatch, invalid file)",
    "E-RUN-004": "capsule wasm not found",
    "E-RUN-005": "inference driver not configured or not declared",
    "E-RUN-006": "inference driver not installed, or inference.command not on PATH",
    "E-RUN-007": "agent loop failed (also a failed trace write)",
    "E-RUN-008": "declared artifact not installed locally",
    "E-RUN-009": "system prompt file (or compaction prompt file, prompt artifact) unreadable",
    "E-RUN-010": "network.internal_port already bound",
    "E-RUN-011": "subprocess killed for a capabilities.resources limit",
    "E-RUN-012": "no delegable cgroup for a subprocess-capable capsule",
    "E-RUN-013": "workdir exceeded capabilities.resources.workdir_max_bytes",
    "E-RUN-014": "sealed composed root failed (could not be built at launch)",
    "E-RUN-015": "(mur) shell tool refused (binary not allowed or sandbox could not be applied)",
    "E-RUN-016": "(mur) inference provider failed after retries",
    "E-EVAL-001": "eval.jsonl parse error (a line is not an event_score or dataset_run record)",
    "E-EVAL-002": "no eval file (or no session) for the named session",
    "E-TRC-001": "trace parse error (a line is not a JSON event, or no session_start/session_end)",
    "E-TRC-002": "session address matched no session, or several",
    # a2a
    "E-A2A-001": "(mur) A2A peer unreachable or answered with an error",
    "E-A2A-002": "(mur) A2A peer refused the request: no or wrong bearer token (HTTP 401)",
    "E-A2A-003": "(mur) A2A token file refused (unreadable, not a regular file, readable by group/other, empty)",
    "E-A2A-004": "(mur) TLS for A2A unusable: bad certificate/key/CA file, or the peer's certificate is not trusted or not the pinned one",
    "E-A2A-005": "(mur) A2A door would listen off loopback without a bearer token",
    # internal
    "E-INTERNAL": "(mur) unexpected internal error, on the command's thread or a background one (never a Python traceback); rerun with MUR_DEBUG=1 and report it",
    # warnings
    "W-BLD-001": "requires_files names the reserved entry murmur.yaml",
    "W-BLD-002": "capsule.wasm shadows another root *.wasm (it is always the payload)",
    "W-BLD-003": "compiled artifact packs build inputs (Cargo.toml, Cargo.lock, *.rs, target/)",
    "W-MAN-001": "(mur) unrecognized key in murmur.yaml, parsed and ignored (upstream's later W-SEC-019)",
    "W-MAN-002": "(mur) version ignored on a local-source artifact (upstream prints it without a code)",
    "W-RUN-001": "(mur) manifest pins a different mur_version than the one running",
    "W-CFG-001": "(mur) literal inference.api_key in a project config file is ignored",
    "W-SEC-001": "shell.allow on a host with no kernel enforcement (environment-only tier)",
    "W-SEC-002": "Linux without Landlock (seccomp-only tier): filesystem scope and exec unenforced",
    "W-SEC-003": "bash plus network.allow on an environment-only host",
    "W-SEC-004": "literal secret in a manifest",
    "W-SEC-005": "kernel enforcement in force: states scope and the unix_sockets exception",
    "W-SEC-006": "inert capability sub-key on a hook",
    "W-SEC-007": "per-artifact network entry outside the capsule ceiling, dropped",
    "W-SEC-008": "inert per-artifact grant on a tool or driver (or any grant on a native tool)",
    "W-SEC-009": "interpreter_runtime grant couples the capsule to the host layout",
    "W-SEC-010": "no cgroup aggregate bound on this host",
    "W-SEC-011": "filesystem.workdir_exec: true makes shell.allow advisory (achieved class capped at advisory)",
}


# What to do, for an error raised without a hint of its own, for the codes whose every use this
# hint fits (a failure says where to look next); a raise site that knows better passes its own.
# Codes that cover unlike failures (E-IO-003: bad input as well as a failed write; E-DEPLOY-003: a
# cut link as well as a failed remote command) have none here: their raise sites give theirs.
FALLBACK_HINTS: dict[str, str] = {
    "E-BLD-001": "an artifact's name is lowercase letters, digits and '-', its version semver (docs/artifacts.md)",
    "E-BLD-002": "requires_files lists relative paths inside the artifact's directory, each once (docs/artifacts.md)",
    "E-BLD-003": "a wasm artifact's directory holds exactly one .wasm at its root: build it first (mur build DIR)",
    "E-BLD-010": "componentize-py's own message above says why",
    "E-CAP-001": "an allow entry is https://host[:port], host or host:port (docs/manifest.md)",
    "E-CAP-002": "a filesystem scope is a relative path inside the workdir",
    "E-CAP-003": "`mur probe` shows what this host enforces; lower capabilities.containment or prepare the host (mur host prepare)",
    "E-CAP-005": "`mur probe` shows what this host enforces (docs/sandbox.md)",
    "E-CFG-002": "`mur config show` lists the configuration; docs/cli.md names every key",
    "E-CFG-003": "fix the config file (~/.murmur/config.yaml or .murmur/config.yaml), or `mur config unset KEY`",
    "E-DEPLOY-004": "`mur deploy logs ID` shows the service's output",
    "E-DEPLOY-006": "check --release-source (docs/deploy.md, the pinned runtime)",
    "E-DEPLOY-007": "`mur deploy --check` shows the target's report; `mur host prepare` fixes what it can",
    "E-DEPLOY-008": "list deployments with `mur deploy ls`",
    "E-DEPLOY-009": "verify the host key (ssh-keyscan) and add it to known_hosts, or pass --trust-new-host on first use",
    "E-DEPLOY-011": "`mur deploy status ID` shows the releases",
    "E-DEPLOY-012": "build the image with `mur image build -m MANIFEST`, or deploy without --image",
    "E-DEPLOY-013": "wait for that command, or pass --lock-wait SECONDS",
    "E-DEPLOY-014": "free space on the target (`mur deploy gc` removes what interrupted commands left)",
    "E-EXP-001": "`mur export k8s --help` lists the options",
    "E-FLEET-001": "fix deploy.yaml (`mur schema fleet` prints its JSON Schema)",
    "E-FLEET-002": "`mur deploy ls` shows the fleet's targets",
    "E-FLEET-003": "`mur deploy status NAME` shows each deployment's state",
    "E-FLEET-004": "wait for that rollout, or pass --lock-wait SECONDS",
    "E-FLEET-005": "the target named above failed its preflight (`mur deploy --check`); --only or --skip-unreachable leaves it out",
    "E-FLEET-006": "the per-target report above says where it stopped and why",
    "E-IMG-002": "check the registry's address and credentials",
    "E-IMG-003": "`docker image ls` shows what the engine holds; `mur image build` makes a capsule's image",
    "E-IMG-004": "write NAME[:TAG], or REGISTRY/NAME[:TAG] to push",
    "E-PROV-001": "docs/provision.md lists the hosts `mur host prepare` supports",
    "E-PROV-002": "the step named above failed; `mur host prepare` can be run again (it changes only what is missing)",
    "E-VM-001": "docs/provision.md: a VM image needs qemu-system-x86 and debootstrap, as root",
    "E-VM-002": "`mur vm ls` lists the VMs",
    "E-IO-001": "check the path (relative to the current directory; a manifest's paths are relative to its directory)",
    "E-IO-002": "check the owner and mode of that path (ls -l)",
    "E-MAN-001": "add the field (docs/manifest.md for a capsule's murmur.yaml, docs/artifacts.md for an artifact's)",
    "E-MAN-002": "fix the YAML syntax at the position shown",
    "E-MAN-003": "docs/manifest.md (a capsule's murmur.yaml) and docs/artifacts.md (an artifact's) give every field and rule",
    "E-REG-001": "`mur search NAME` finds published versions; `mur publish` puts one in the local store",
    "E-REG-002": "the artifact changed after it was pinned: install it again from a source you trust (mur install)",
    "E-REG-003": "give the new build another version",
    "E-REG-004": "publish a semver version (e.g. 1.0.0)",
    "E-REG-005": "`mur install` updates murmur.lock",
    "E-RUN-002": "build the component against this mur's WIT worlds (docs/wasm.md)",
    "E-RUN-003": "`mur install` writes murmur.lock",
    "E-RUN-004": "build the capsule's component (mur build DIR)",
    "E-RUN-005": "declare the driver artifact and inference.driver (docs/inference.md)",
    "E-RUN-006": "`mur install` installs declared artifacts; with transport: process, inference.command must be on PATH",
    "E-RUN-007": "`mur trace show` has the session's events",
    "E-RUN-008": "`mur install` installs the manifest's artifacts",
    "E-RUN-009": "check the prompt file's path (relative to murmur.yaml)",
    "E-RUN-010": "another process holds that port: stop it, or change network.internal_port",
    "E-RUN-011": "raise the limit in capabilities.resources, or make the tool use less",
    "E-RUN-012": "`mur probe` says why; docs/sandbox.md (cgroups) says how to delegate one",
    "E-RUN-013": "raise capabilities.resources.workdir_max_bytes, or make the tools write less",
    "E-RUN-014": "`mur probe` says what this host can build (docs/sandbox.md)",
    "E-RUN-015": "capabilities.shell.allow names the binaries a tool may run; `mur run --explain-scope` shows the sandbox",
    "E-RUN-016": "`mur trace show` has the session's events",
    "E-A2A-002": "pass --token, --token-file or MURMUR_A2A_TOKEN (a deployment's is in its record)",
    "E-A2A-003": "the token file must be a regular file of mode 0600 holding the token",
    "E-A2A-004": "check --cacert or --pin-sha256 against the server's certificate",
    "E-A2A-005": "pass --a2a-token-file FILE, or bind to 127.0.0.1",
    "E-INTERNAL": "rerun with MUR_DEBUG=1 to see the traceback, and report it",
}


def os_error_hint(cause: BaseException | None, message: str = "") -> str | None:
    """What to do about a failed file operation, from the system's reason (the OSError a MurError was
    raised from): one answer per errno wherever the read or write was, so a raise site that only
    names the file and the reason still says what to do next. The file is "it" when `message`
    already names it."""
    import errno
    import os

    if not isinstance(cause, OSError) or cause.errno is None:
        return None
    named = cause.filename
    if isinstance(named, bytes):
        named = os.fsdecode(named)
    general = {  # true wherever the operation was
        errno.ENOSPC: "the filesystem is full: free space (df -h) and run the command again",
        errno.EDQUOT: "the disk quota is used up: free space and run the command again",
        errno.EROFS: "the filesystem is read-only: use a writable location",
        errno.EMFILE: "this process has too many open files: raise the limit (ulimit -n) and run the command again",
        errno.ENFILE: "the system has too many open files: close some, then run the command again",
    }
    if not isinstance(named, (str, os.PathLike)):  # no path (or a descriptor): nothing to point at
        return general.get(cause.errno)
    where = os.fspath(named)
    where = "it" if where in message else where
    hints = {
        errno.ENOENT: f"{where} does not exist: check the path (a relative one is read from the current directory)",
        errno.EACCES: f"this user (uid {os.getuid()}) may not use {where}: check its owner and mode, and its folders'",
        errno.EPERM: f"the system refused this on {where}: check its owner, mode and attributes (lsattr)",
        errno.ENOSPC: f"the filesystem holding {where} is full: free space (df -h) and run the command again",
        errno.EROFS: f"{where} is on a read-only filesystem: use a writable location",
        errno.EISDIR: f"{where} is a directory: give a file",
        errno.ENOTDIR: f"a part of {where} is a file, not a directory: check the path",
        errno.ELOOP: f"{where} is (or passes through) a symbolic link, which is not followed here: give the real path",
        errno.ENAMETOOLONG: f"{where} is too long a path: use a shorter one",
        errno.EEXIST: f"{where} already exists: remove it or choose another name",
    }
    return hints.get(cause.errno) or general.get(cause.errno)


class MurError(Exception):
    """A user-facing failure: a catalogue code, a message, and an optional hint."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error[{self.code}]: {self.message}"
        hint = self.hint or FALLBACK_HINTS.get(self.code) or os_error_hint(self.__cause__, self.message)
        if hint:
            text += f"\n  hint: {hint}"
        return text

    def __str__(self) -> str:
        return self.render()


WarningSink = Callable[[str, str], None]


def _stderr_sink(code: str, message: str) -> None:
    print(f"warning[{code}]: {message}", file=sys.stderr, flush=True)


_sink: WarningSink = _stderr_sink


def warn(code: str, message: str) -> None:
    """Emit ``warning[CODE]: message`` through the current sink."""
    _sink(code, message)


def set_warning_sink(sink: WarningSink | None) -> WarningSink:
    """Replace the warning sink (None restores stderr); returns the previous one."""
    global _sink
    previous = _sink
    _sink = sink or _stderr_sink
    return previous


class collect_warnings:
    """Context manager collecting ``(code, message)`` warnings instead of printing them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self._previous: WarningSink | None = None

    def __enter__(self) -> list[tuple[str, str]]:
        self._previous = set_warning_sink(lambda c, m: self.items.append((c, m)))
        return self.items

    def __exit__(self, *exc: object) -> None:
        set_warning_sink(self._previous)


def catalogue_markdown() -> str:
    """docs/errors.md, rendered from CATALOGUE and FALLBACK_HINTS (`python -m mur.errors > docs/errors.md`)."""
    lines = [
        "# Diagnostic codes",
        "",
        "Generated from `CATALOGUE` and `FALLBACK_HINTS` in `mur/errors.py` (`python -m mur.errors >",
        "docs/errors.md`); a test keeps the two identical. Errors render once, at the CLI edge, as",
        "`error[CODE]: message` plus a `  hint: ...` line on stderr and exit 1 (usage errors exit 2, with",
        "click's usage text). The hint is the raise site's own, else the code's general one in the last",
        "column; a code that covers unlike failures (E-IO-003: bad input and a failed write alike) has",
        "none there, and each of its raise sites that can say what to do does; where one does not, a",
        "failed read or write says what to do about the system's reason (`os_error_hint`: a missing",
        "path, no permission, a full or read-only filesystem, a symbolic link, too many open files).",
        "Warnings render as `warning[CODE]: message` on stderr and never change the exit status.",
        "Codes marked (mur) are this implementation's own; every other code is upstream's, with",
        "upstream's meaning.",
        "",
        "| Code | Meaning | Hint (unless the error gives its own) |",
        "|---|---|---|",
    ]
    pipe, escaped = "|", "\\|"
    lines.extend(f"| `{code}` | {meaning.replace(pipe, escaped)} | {FALLBACK_HINTS.get(code, '').replace(pipe, escaped)} |"
                 for code, meaning in CATALOGUE.items())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(catalogue_markdown())
