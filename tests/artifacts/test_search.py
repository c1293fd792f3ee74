"""`mur search`: ranking, matching, version order, --limit, and where it looks (a static index file,
the local stores in a tmp HOME, the configured index URL); malformed indexes are E-IO-003."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mur.artifacts import search as searching
from mur.artifacts.store import ArtifactMeta, Store, global_store
from mur.errors import MurError


def entry(name, version="1.0.0", runtime="tool", description=None, tags=None, **extra):
    item = {"name": name, "version": version, "runtime": runtime, **extra}
    if description is not None:
        item["description"] = description
    if tags is not None:
        item["tags"] = tags
    return item


def write_index(path: Path, artifacts: list, **top) -> Path:
    doc = {"schema_version": "1", "updated_at": "2026-11-30T00:00:00Z", "artifacts": artifacts, **top}
    path.write_text(json.dumps(doc))
    return path


CATALOG = [
    entry("web-fetch", description="Fetch a URL", tags=["http"]),
    entry("greeter", runtime="skill", description="Say hi politely"),
    entry("hello", description="Prints a GREETING line"),
    entry("big-greet", runtime="hook"),
    entry("calendar", tags=["Greetings", "dates"]),
    entry("greet", version="0.2.0", runtime="skill", description="Greets"),
]


@pytest.fixture
def index(isolated) -> Path:
    return write_index(isolated / "artifacts-index.json", CATALOG)


def test_rank_exact_then_prefix_then_substring_then_description_or_tag(isolated, mur, index):
    result = mur("search", "GREET", "--registry", str(index))
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        "NAME       VERSION  RUNTIME  DESCRIPTION\n"
        "greet      0.2.0    skill    Greets\n"
        "greeter    1.0.0    skill    Say hi politely\n"
        "big-greet  1.0.0    hook     \u2014\n"
        "calendar   1.0.0    tool     \u2014\n"
        "hello      1.0.0    tool     Prints a GREETING line\n"
    )


def test_matches_name_description_and_tags_case_insensitively(isolated, mur, index):
    names = lambda q: [row["name"] for row in json.loads(mur("search", q, "--registry", str(index), "--json").out)]
    assert names("HTTP") == ["web-fetch"]  # tag only
    assert names("url") == ["web-fetch"]  # description only
    assert names("dates") == ["calendar"]
    assert names("politely") == ["greeter"]
    assert names("  Fetch ") == ["web-fetch"]  # surrounding blanks do not count
    assert names("zzz") == []


def test_no_match_is_a_message_and_exit_0(isolated, mur, index):
    result = mur("search", "kubernetes", "--registry", str(index))
    assert (result.code, result.out, result.err) == (0, "No results found.\n", "")  # upstream's words


def test_json_is_one_line_list(isolated, mur, index):
    result = mur("search", "web", "--registry", str(index), "--json")
    assert result.out.count("\n") == 1
    assert json.loads(result.out) == [
        {"name": "web-fetch", "version": "1.0.0", "runtime": "tool", "description": "Fetch a URL",
         "tags": ["http"], "platforms": []}
    ]
    empty = mur("search", "nothing-here", "--registry", str(index), "--json")
    assert (empty.code, empty.out) == (0, "[]\n")


def test_newest_version_per_name_first(isolated, mur):
    versions = ["0.9.0", "0.10.0", "1.0.0-rc.1", "1.0.0", "1.0.0-rc.2", "0.10.0", "2.0.0-alpha", "0.9.1"]
    path = write_index(
        isolated / "idx.json",
        [entry("greet", v) for v in versions] + [entry("greeter", "10.0.0"), entry("greeter", "9.0.0")],
    )
    rows = json.loads(mur("search", "greet", "--registry", str(path), "--json", "--limit", "20").out)
    assert [(r["name"], r["version"]) for r in rows] == [
        ("greet", "2.0.0-alpha"),
        ("greet", "1.0.0"),
        ("greet", "1.0.0-rc.2"),
        ("greet", "1.0.0-rc.1"),
        ("greet", "0.10.0"),  # numeric, not string, comparison; the duplicate is shown once
        ("greet", "0.9.1"),
        ("greet", "0.9.0"),
        ("greeter", "10.0.0"),
        ("greeter", "9.0.0"),
    ]


def test_description_matches_keep_a_names_versions_together(isolated):
    entries = searching.parse_index(
        json.dumps({"schema_version": "1", "artifacts": [
            entry("alpha", "1.0.0", description="old thing"),
            entry("alpha", "2.0.0", description="a modern WIDGET"),
            entry("widgets", "0.1.0"),
            entry("zeta", "3.0.0", tags=["widget"]),
            entry("alpha", "1.5.0", description="widget v1.5"),
        ]}),
        "mem",
    )
    hits = searching.rank_entries(entries, "widget")
    assert [(h.name, h.version) for h in hits] == [("widgets", "0.1.0"), ("alpha", "2.0.0"), ("alpha", "1.5.0"),
                                                    ("zeta", "3.0.0")]


def test_version_order_falls_back_to_strings(isolated):
    entries = [searching.IndexEntry("x", v, "tool") for v in ("beta", "1.2", "alpha", "1.10", "v2")]
    assert [h.version for h in searching.rank_entries(entries, "x")] == ["v2", "beta", "alpha", "1.10", "1.2"]


def test_limit_caps_rows_and_must_be_positive(isolated, mur, index):
    result = mur("search", "e", "--registry", str(index), "--limit", "2")
    assert result.out == (  # 'e' is inside every name: one rank, so alphabetical, cut after two
        "NAME       VERSION  RUNTIME  DESCRIPTION\n"
        "big-greet  1.0.0    hook     \u2014\n"
        "calendar   1.0.0    tool     \u2014\n"
    )
    many = write_index(isolated / "many.json", [entry(f"tool-{i:02d}") for i in range(15)])
    assert len(mur("search", "tool", "--registry", str(many)).out.splitlines()) == 11  # header + default 10
    assert len(json.loads(mur("search", "tool", "--registry", str(many), "--json", "--limit", "3").out)) == 3
    for bad in ("0", "-1"):
        result = mur("search", "tool", "--registry", str(many), "--limit", bad)
        assert result.code == 2
        assert result.out == ""
        assert result.err.endswith(f"Error: invalid value '{bad}' for '--limit': must be at least 1\n")
        assert "Traceback" not in result.err


def test_limit_keeps_the_best_ranked(isolated, mur, index):
    rows = json.loads(mur("search", "greet", "--registry", str(index), "--json", "--limit", "2").out)
    assert [r["name"] for r in rows] == ["greet", "greeter"]


def test_description_cells_stay_on_one_line(isolated, mur):
    path = write_index(isolated / "i.json", [entry("tool", description="line one\nline\ttwo\x1b[31m")])
    out = mur("search", "tool", "--registry", str(path)).out
    assert out.splitlines()[1] == "tool  1.0.0    tool     line one line two\\x1b[31m"


def test_index_platforms_accept_strings_and_pairs(isolated, mur):
    path = write_index(isolated / "i.json", [entry("a", platforms=["linux-x86_64"]),
                                             entry("ab", platforms=[["darwin", "aarch64"]])])
    rows = json.loads(mur("search", "a", "--registry", str(path), "--json").out)
    assert [r["platforms"] for r in rows] == [["linux-x86_64"], ["darwin-aarch64"]]


# --- malformed indexes --------------------------------------------------------------------------

MALFORMED = [
    ("{not json", "failed to parse artifact index from {p}: not valid JSON (Expecting property name enclosed in "
                  "double quotes: line 1 column 2 (char 1))"),
    ("[]", "failed to parse artifact index from {p}: expected a JSON object with 'schema_version' and 'artifacts'"),
    ('{"artifacts": []}', "failed to parse artifact index from {p}: missing field 'schema_version'"),
    ('{"schema_version": 1, "artifacts": []}',
     "failed to parse artifact index from {p}: 'schema_version' must be a string (\"1\")"),
    ('{"schema_version": "2", "artifacts": []}', "unsupported artifact index schema version '2' from {p} (expected 1)"),
    ('{"schema_version": "1"}', "failed to parse artifact index from {p}: missing field 'artifacts'"),
    ('{"schema_version": "1", "artifacts": {}}', "failed to parse artifact index from {p}: 'artifacts' must be a list"),
    ('{"schema_version": "1", "artifacts": [7]}',
     "failed to parse artifact index from {p}: artifacts[0] must be an object"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "1"}]}',
     "failed to parse artifact index from {p}: artifacts[0]: missing field 'runtime'"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "1", "runtime": "tool"}, '
     '{"name": 5, "version": "1", "runtime": "tool"}]}',
     "failed to parse artifact index from {p}: artifacts[1].name must be a non-empty string"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "", "runtime": "tool"}]}',
     "failed to parse artifact index from {p}: artifacts[0].version must be a non-empty string"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "1", "runtime": "tool", "tags": "x"}]}',
     "failed to parse artifact index from {p}: artifacts[0].tags must be a list of strings"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "1", "runtime": "tool", "description": 3}]}',
     "failed to parse artifact index from {p}: artifacts[0].description must be a string"),
    ('{"schema_version": "1", "artifacts": [{"name": "a", "version": "1", "runtime": "tool", "platforms": [1]}]}',
     "failed to parse artifact index from {p}: artifacts[0].platforms entries must be 'os-arch' strings or "
     "[os, arch] pairs"),
    (b"\xff\xfe garbage", None),
]


@pytest.mark.parametrize("body,message", MALFORMED)
def test_malformed_index_is_e_io_003(isolated, mur, body, message):
    path = isolated / "bad.json"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    result = mur("search", "a", "--registry", str(path))
    assert result.code == 1
    assert result.out == ""
    first, hint = result.err.splitlines()
    if message is None:
        assert first.startswith(f"error[E-IO-003]: failed to parse artifact index from {path}: not valid JSON (")
    else:
        assert first == "error[E-IO-003]: " + message.format(p=path)
    assert hint.startswith("  hint: point registry.index_url")


def test_missing_index_file_is_e_io_003(isolated, mur):
    result = mur("search", "a", "--registry", "nope/artifacts-index.json")
    assert result.code == 1
    assert result.err.splitlines()[0] == (
        f"error[E-IO-003]: failed to read artifact index from {isolated}/work/nope/artifacts-index.json: "
        "No such file or directory"
    )


# --- where it looks -----------------------------------------------------------------------------


def write_config(home: Path, text: str) -> None:
    (home / ".murmur").mkdir(parents=True, exist_ok=True)
    (home / ".murmur" / "config.yaml").write_text(text)


def test_configured_index_url_is_used_without_registry(isolated, mur, index):
    write_config(isolated / "home", f"registry:\n  index_url: {index}\n")
    assert mur("search", "web").out.splitlines()[1].startswith("web-fetch")
    write_config(isolated / "home", f"registry:\n  index_url: {index.as_uri()}\n")  # file:// URL
    assert mur("search", "web").out.splitlines()[1].startswith("web-fetch")
    assert mur("search", "web", "--registry", index.as_uri()).out.splitlines()[1].startswith("web-fetch")


def test_nothing_configured_searches_the_local_stores_only(isolated, mur):
    """Offline first: no registry configured or asked for means no network at all."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(500)

    assert searching.search("greet", transport=httpx.MockTransport(handler), cwd=isolated / "work") == []
    assert seen == []
    result = mur("search", "greet")
    assert (result.code, result.out) == (0, "No results found.\n")
    assert result.err == ("  note: nothing matches 'greet' in the local stores; search a remote index with --remote, "
                          "or --registry URL|PATH\n")
    Store(global_store()).put(ArtifactMeta("greet", "0.1.0", "static", "skill", description="Greets"), "0" * 64,
                              data=b"zip", overwrite=False)
    assert mur("search", "greet").out.splitlines()[1].split() == ["greet", "0.1.0", "skill", "Greets"]
    result = mur("search", "greet", "--remote", "--registry", "local")
    assert result.code == 2 and "'--remote' cannot be used with '--registry'" in result.err


def test_remote_reads_upstreams_default_index(isolated):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.headers.get("authorization")))
        return httpx.Response(200, json={"schema_version": "1", "updated_at": "x", "artifacts": [entry("greet")]})

    hits = searching.search("greet", remote=True, transport=httpx.MockTransport(handler), cwd=isolated / "work")
    assert [h.name for h in hits] == ["greet"]
    assert seen == [(
        "GET",
        "https://raw.githubusercontent.com/murmur-nexus/default-artifacts/refs/heads/main/artifacts-index.json",
        None,
    )]


def test_http_index_failures_are_e_io_003(isolated):
    url = "http://index.invalid/artifacts-index.json"

    def not_found(request):
        return httpx.Response(404, text="nope")

    def refused(request):
        raise httpx.ConnectError("connection refused", request=request)

    def garbage(request):
        return httpx.Response(200, text="<html>")

    cases = [
        (not_found, f"failed to fetch artifact index from {url}: HTTP 404 Not Found"),
        (refused, f"failed to fetch artifact index from {url}: connection refused"),
        (garbage,
         f"failed to parse artifact index from {url}: not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ]
    for handler, message in cases:
        with pytest.raises(MurError) as exc:
            searching.search("a", registry=url, transport=httpx.MockTransport(handler))
        assert (exc.value.code, exc.value.message) == ("E-IO-003", message)


def publish_skill(mur, src: Path, name: str, version: str, description: str | None = None) -> None:
    src.mkdir(parents=True, exist_ok=True)
    extra = f"description: {description}\n" if description else ""
    (src / "murmur.yaml").write_text(f'name: {name}\nversion: "{version}"\nruntime: skill\n{extra}')
    (src / "skill.md").write_text("# skill\n")
    built = mur("build", str(src))
    assert built.code == 0, built.err
    zip_path = built.out.strip().removeprefix("Built artifact: ")
    assert mur("publish", zip_path).code == 0


def test_local_searches_the_project_and_global_stores(isolated, mur):
    home = isolated / "home"
    publish_skill(mur, isolated / "src/greet1", "greet", "0.1.0", "Says hello")
    publish_skill(mur, isolated / "src/greet2", "greet", "0.2.0", "Says hello louder")
    Store(global_store()).put(
        ArtifactMeta("calc", "1.0.0", "wasm", "tool", description="Adds numbers", tags=["math", "greeting-free"]),
        "0" * 64, data=b"zip", overwrite=False,
    )
    result = mur("search", "greet", "--registry", "local")
    assert result.out == (
        "NAME   VERSION  RUNTIME  DESCRIPTION\n"
        "greet  0.2.0    skill    Says hello louder\n"
        "greet  0.1.0    skill    Says hello\n"
        "calc   1.0.0    tool     Adds numbers\n"
    )
    assert json.loads(mur("search", "MATH", "--registry", "LOCAL", "--json").out) == [
        {"name": "calc", "version": "1.0.0", "runtime": "tool", "description": "Adds numbers",
         "tags": ["math", "greeting-free"], "platforms": []}
    ]

    # a project: its store is searched too; a name@version in both stores is listed once
    project = isolated / "proj"
    project.mkdir()
    (project / "murmur.yaml").write_text('name: cap\nversion: "0.1.0"\nartifacts: []\n')
    assert mur("install", "greet@0.1.0", "--registry", "local", cwd=project).code == 0
    Store(project / ".murmur/artifacts").put(
        ArtifactMeta("greet-extra", "0.0.1", "static", "skill"), "1" * 64, data=b"z", overwrite=False,
    )
    (project / "sub").mkdir()
    rows = json.loads(mur("search", "greet", "--registry", "local", "--json", cwd=project / "sub").out)
    assert [(r["name"], r["version"]) for r in rows] == [
        ("greet", "0.2.0"), ("greet", "0.1.0"), ("greet-extra", "0.0.1"), ("calc", "1.0.0")
    ]
    # outside the project only the global store counts
    assert "greet-extra" not in mur("search", "greet", "--registry", "local").out
    assert not (home / ".murmur/artifacts/greet-extra").exists()


def test_local_store_with_broken_metadata_is_e_io_003(isolated, mur):
    Store(global_store()).put(ArtifactMeta("calc", "1.0.0", "wasm", "tool"), "0" * 64, data=b"z", overwrite=False)
    meta = global_store() / "calc/1.0.0/calc-1.0.0.meta.json"
    meta.write_text("{")
    result = mur("search", "calc", "--registry", "local")
    assert result.code == 1
    assert result.err.startswith(f"error[E-IO-003]: registry I/O error: invalid metadata at {meta}: ")


def test_murmur_yaml_registry_settings_choose_like_install(isolated, mur, index):
    """`registry.default` / `registry.remote_url` in murmur.yaml send search where they send install."""
    write_config(isolated / "home", f"registry:\n  index_url: {index}\n")
    publish_skill(mur, isolated / "src/greet", "greet", "0.1.0", "Local greeting")
    project = isolated / "proj"
    project.mkdir()
    manifest = 'name: cap\nversion: "0.1.0"\nartifacts: []\n'

    (project / "murmur.yaml").write_text(manifest)  # no registry settings: the index
    assert json.loads(mur("search", "greet", "--json", cwd=project).out)[0]["description"] == "Greets"
    (project / "murmur.yaml").write_text(manifest + "registry:\n  default: local\n")
    assert json.loads(mur("search", "greet", "--json", cwd=project).out)[0]["description"] == "Local greeting"

    for settings in ("registry:\n  default: remote\n", "registry:\n  remote_url: http://127.0.0.1:9\n"):
        (project / "murmur.yaml").write_text(manifest + settings)
        searched = mur("search", "greet", cwd=project)
        installed = mur("install", "greet", cwd=project)
        assert searched.code == installed.code == 1
        assert searched.err == installed.err == (
            "error[E-IO-003]: NEXUS_API_KEY is required for remote registry mode. Set it or use local mode.\n"
            "  hint: export NEXUS_API_KEY=<key>, or pass --registry local\n"
        )
    (project / "murmur.yaml").write_text(manifest + "registry:\n  default: bogus\n")
    assert mur("search", "greet", cwd=project).err == mur("install", "greet", cwd=project).err == (
        "error[E-IO-003]: invalid registry.default 'bogus' (expected local|remote)\n"
        "  hint: set registry.default in the project's murmur.yaml to local or remote\n"
    )


def test_registry_url_without_key_is_refused_like_install(isolated, mur):
    result = mur("search", "greet", "--registry", "http://127.0.0.1:9")
    assert result.code == 1
    assert result.err.startswith("error[E-IO-003]: NEXUS_API_KEY is required for remote registry mode.")


def test_nexus_listing_through_the_client(isolated, monkeypatch):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((str(request.url), request.headers.get("authorization")))
        if request.headers.get("authorization") != "Bearer k3y":
            return httpx.Response(401, json={"error": "unauthorized"})
        return httpx.Response(200, json=[
            {"name": "greet", "version": "0.1.0", "runtime": "static", "artifact_runtime": "skill",
             "platforms": [], "description": "Hi", "tags": ["hello"]},
            {"name": "native-tool", "version": "1.0.0", "runtime": "native", "artifact_runtime": "",
             "platforms": [["linux", "x86_64"]], "description": None, "tags": []},
        ])

    transport = httpx.MockTransport(handler)
    hits = searching.search("", registry="http://127.0.0.1:9/", transport=transport, env={"NEXUS_API_KEY": "k3y"})
    assert [h.to_json() for h in hits] == [
        {"name": "greet", "version": "0.1.0", "runtime": "skill", "description": "Hi", "tags": ["hello"],
         "platforms": []},
        {"name": "native-tool", "version": "1.0.0", "runtime": "native", "description": None, "tags": [],
         "platforms": ["linux-x86_64"]},
    ]
    assert calls == [("http://127.0.0.1:9/v1/artifacts", "Bearer k3y")]
    with pytest.raises(MurError) as exc:
        searching.search("g", registry="http://127.0.0.1:9", transport=transport, env={"NEXUS_API_KEY": "wrong"})
    assert exc.value.code == "E-IO-003"
    assert exc.value.message == (
        "registry error: registry authentication failed for http://127.0.0.1:9. Check NEXUS_API_KEY and try again."
    )


def test_render_table_without_rows_is_the_header(isolated):
    assert searching.render_table([]) == "NAME  VERSION  RUNTIME  DESCRIPTION"
