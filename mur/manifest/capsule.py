"""The capsule manifest (`murmur.yaml` for `mur run`, spec part 2) as pydantic models.

These models are what the user wrote, typed. Cross-field rules (transport field rules, endpoint
validation, prompt exclusivity, narrowing, ...) live in ``mur.manifest.rules`` and run after the
models parse; ``mur.manifest.load`` is the entry point that does both and maps every failure to an
``E-MAN-*`` / ``E-CAP-*`` MurError.

Types are strict (a YAML ``1.0`` is not a version string, ``yes`` is not an int). A YAML ``null`` is
treated as "absent" everywhere. Unknown keys are kept (``extra="allow"``) so the loader can warn about
them (W-MAN-001) instead of failing: manifests written for newer runtimes still load.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

MiB = 1024 * 1024
GiB = 1024 * MiB
# Upper bound for every count/size: these end up in setrlimit(2), cgroup files and wasmtime store
# limits, all of which take a signed 64-bit value (upstream reads them as u64/usize).
I64_MAX = 2**63 - 1

PosInt = Annotated[int, Field(gt=0, le=I64_MAX)]

ROLES = ("tool", "driver", "hook", "skill")
CONTAINMENT_CLASSES = ("advisory", "scoped", "sealed")


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, validate_default=False)

    def declared(self, field: str) -> bool:
        """Was `field` written in the manifest (as opposed to defaulted)?"""
        return field in self.model_fields_set


# --- capabilities -----------------------------------------------------------------------------


class NetworkCaps(Model):
    allow: list[str] = Field(default_factory=list)
    unix_sockets: bool = False


class FilesystemCaps(Model):
    scope: Optional[str] = None
    workdir_exec: bool = False

    @field_validator("scope", mode="before")
    @classmethod
    def _trim(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


class InterpreterDir(Model):
    path: str
    list_dir: bool


class InterpreterRuntime(Model):
    binary: str
    dirs: list[InterpreterDir]


class ShellCaps(Model):
    allow: list[str] = Field(default_factory=list)
    strip_env: list[str] = Field(default_factory=list)
    baseline_env: list[str] = Field(default_factory=list)
    interpreter_runtime: list[InterpreterRuntime] = Field(default_factory=list)


class SpawnCaps(Model):
    allow: list[str] = Field(default_factory=list)


class EnvCaps(Model):
    allow: list[str] = Field(default_factory=list)


class Limits(Model):
    """Bounds on a WASM guest inside its wasmtime store (spec "Execution limits")."""

    memory_bytes: PosInt = 512 * MiB
    table_elements: PosInt = 100_000
    instances: PosInt = 1000
    deadline_seconds: PosInt = 600


class Resources(Model):
    """Bounds on native subprocesses (spec "Host resource limits")."""

    max_processes: PosInt = 128
    max_open_files: PosInt = 1024
    max_file_size_bytes: PosInt = 4 * GiB
    cpu_seconds: PosInt = 3600
    memory_bytes: PosInt = 2 * GiB
    cgroup_memory_bytes: PosInt = 4 * GiB
    cgroup_pids_max: PosInt = 256
    cgroup_cpu_percent: PosInt = 200
    cgroup_io_bytes_per_sec: PosInt = 100 * MiB
    workdir_max_bytes: PosInt = 10 * GiB


class Capabilities(Model):
    network: NetworkCaps = Field(default_factory=NetworkCaps)
    filesystem: FilesystemCaps = Field(default_factory=FilesystemCaps)
    shell: Optional[ShellCaps] = None
    spawn: Optional[SpawnCaps] = None
    env: EnvCaps = Field(default_factory=EnvCaps)
    limits: Limits = Field(default_factory=Limits)
    resources: Resources = Field(default_factory=Resources)
    containment: Optional[Literal["advisory", "scoped", "sealed"]] = None

    @field_validator("containment", mode="before")
    @classmethod
    def _trim(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @property
    def shell_allow(self) -> list[str]:
        return list(self.shell.allow) if self.shell else []

    @property
    def spawn_allow(self) -> list[str]:
        return list(self.spawn.allow) if self.spawn else []


# --- artifacts --------------------------------------------------------------------------------


class ArtifactDecl(Model):
    name: str
    version: Optional[str] = None
    runtime: str = "tool"
    source: Optional[str] = None
    local_source: Optional[bool] = None
    prompt_payload: Optional[bool] = None
    capabilities: Optional[Capabilities] = None

    @property
    def uses_local_source(self) -> bool:
        """local_source as written, else the role default (true only for skills)."""
        return self.local_source if self.local_source is not None else self.runtime == "skill"

    @property
    def is_prompt_payload(self) -> bool:
        return self.prompt_payload if self.prompt_payload is not None else self.runtime == "skill"

    @property
    def display_version(self) -> str:
        """The version shown to users; local-source artifacts show `local`."""
        return "local" if self.source is not None else (self.version or "")


# --- inference --------------------------------------------------------------------------------


class DriverRef(Model):
    artifact: Optional[str] = None
    config: Optional[dict[Any, Any]] = None  # free-form; must convert to a JSON object (rules.py)


class Compaction(Model):
    threshold: float = 0.98
    model: Optional[str] = None
    system_prompt: Optional[str] = None
    system_prompt_file: Optional[str] = None
    dump_summaries: bool = False


class Inference(Model):
    transport: Literal["http", "process"]
    model: str
    max_turns: PosInt = 10
    max_task_reopens: Annotated[int, Field(ge=0, le=I64_MAX)] = 1
    max_tokens: Optional[PosInt] = None
    endpoint: Optional[str] = None
    api_key: Optional[str] = None
    driver: Optional[DriverRef] = None
    provider: Optional[DriverRef] = None
    command: Optional[str] = None
    compaction: Optional[Compaction] = None
    system_prompt: Optional[str] = None
    system_prompt_file: Optional[str] = None
    system_prompt_artifact: Optional[str] = None

    @property
    def driver_artifact(self) -> Optional[str]:
        """inference.driver.artifact, falling back to the legacy inference.provider.artifact."""
        if self.driver and self.driver.artifact:
            return self.driver.artifact
        if self.provider and self.provider.artifact:
            return self.provider.artifact
        return None

    @property
    def effective_max_tokens(self) -> int:
        return self.max_tokens if self.max_tokens is not None else 8192

    @property
    def effective_command(self) -> str:
        return self.command or "claude"


# --- other sections ---------------------------------------------------------------------------


class NetworkSection(Model):
    internal_port: Optional[int] = Field(None, gt=0, le=65535)


class Context(Model):
    max_tokens: Optional[PosInt] = None


class Scorer(Model):
    type: Literal["exit_ok", "max_turns", "max_tokens", "tool_sequence", "llm_judge"]
    name: str
    max: Optional[int] = None
    expected: Optional[list[str]] = None


class Eval(Model):
    dataset_id: Optional[str] = None
    scorers: list[Scorer] = Field(default_factory=list)


class Observability(Model):
    otel_endpoint: Optional[str] = None
    eval: Optional[Eval] = None


class Lifecycle(Model):
    task_acceptance: Literal["none", "single", "queue"] = "single"
    after_task: Literal["exit", "sleep"] = "exit"
    queue_depth: PosInt = 1
    input_timeout_secs: Optional[PosInt] = None
    conversation: Literal["stateless", "threaded"] = "stateless"


class RegistrySection(Model):
    default: Optional[str] = None
    remote_url: Optional[str] = None


class TraceSection(Model):
    include_tool_output: bool = False


class Capsule(Model):
    """A parsed capsule manifest: exactly what the user wrote, with the spec's defaults."""

    name: str
    version: str
    mur_version: Optional[str] = None
    artifacts: list[ArtifactDecl] = Field(default_factory=list)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    network: NetworkSection = Field(default_factory=NetworkSection)
    context: Context = Field(default_factory=Context)
    observability: Observability = Field(default_factory=Observability)
    inference: Optional[Inference] = None
    lifecycle: Lifecycle = Field(default_factory=Lifecycle)
    registry: Optional[RegistrySection] = None
    trace: TraceSection = Field(default_factory=TraceSection)

    def artifact(self, name: str) -> Optional[ArtifactDecl]:
        """The first artifacts: entry with this name."""
        return next((a for a in self.artifacts if a.name == name), None)

    def by_role(self, role: str) -> list[ArtifactDecl]:
        return [a for a in self.artifacts if a.runtime == role]
