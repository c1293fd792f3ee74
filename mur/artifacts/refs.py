"""What `mur install REF` accepts (upstream `artifact_ref.rs`, `commands/install.rs`).

* a local `.mur.zip` path: starts with `./`, `../` or `/`, contains `/` and ends `.mur.zip`, or
  simply ends `.mur.zip` (a file in the current directory);
* `name@version`: exactly one `@`, both halves non-empty;
* a bare `name`: the highest published version in the registry;
* `github:owner/repo@tag` parses, but this mur has no GitHub source (no network beyond the
  registry), so installing one is refused with a hint; any other `prefix:` is unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass

from mur.errors import MurError


@dataclass(frozen=True)
class LocalFileRef:
    path: str


@dataclass(frozen=True)
class VersionedRef:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class BareRef:
    name: str


@dataclass(frozen=True)
class GitHubRef:
    owner: str
    repo: str
    tag: str


ArtifactRef = LocalFileRef | VersionedRef | BareRef | GitHubRef


def is_local_path(text: str) -> bool:
    return (
        text.startswith(("./", "../", "/"))
        or ("/" in text and text.endswith(".mur.zip"))
        or text.endswith(".mur.zip")
    )


REF_FORMS = "an install reference is NAME@VERSION, github:OWNER/REPO@TAG, or a path to a .mur.zip"


def parse_versioned(text: str) -> VersionedRef:
    """`name@version`; E-IO-003 in upstream's words otherwise."""
    parts = text.split("@")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise MurError("E-IO-003", "artifact reference must be in the format <name@version>", "e.g. greet@0.1.0")
    return VersionedRef(parts[0], parts[1])


def parse_ref(text: str) -> ArtifactRef:
    """Classify an install reference."""
    value = text.strip()
    if not value:
        raise MurError("E-IO-003", "artifact reference cannot be empty", REF_FORMS)
    if is_local_path(value):
        return LocalFileRef(value)
    if ":" in value:
        prefix, _, rest = value.partition(":")
        if prefix != "github":
            raise MurError("E-IO-003", f"unsupported artifact source prefix '{prefix}'", REF_FORMS)
        repo_ref, at, tag = rest.partition("@")
        owner, slash, repo = repo_ref.partition("/")
        if not at or not slash or not owner.strip() or not repo.strip() or not tag.strip():
            raise MurError(
                "E-IO-003", f"invalid github artifact reference 'github:{rest}' (expected github:<owner>/<repo>@<tag>)",
                REF_FORMS,
            )
        return GitHubRef(owner, repo, tag)
    if "@" not in value:
        return BareRef(value)
    return parse_versioned(value)
