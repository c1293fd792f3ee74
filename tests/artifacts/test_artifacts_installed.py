"""What `mur run` calls: find_installed, check_lock_for_run, extract_payload; plus refs."""

from __future__ import annotations

import io
import os
import stat
import zipfile

import pytest

from mur.artifacts.lock import lock_path, read_lock
from mur.artifacts.refs import BareRef, GitHubRef, LocalFileRef, VersionedRef, parse_ref
from mur.artifacts.installed import check_lock_for_run, extract_payload, find_installed, read_payload
from mur.artifacts.store import global_store, install_zip, project_store
from mur.errors import MurError


def zip_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def tool(name="greet", version="0.1.0", marker=b"") -> bytes:
    return zip_of(
        {
            "murmur.yaml": f'name: {name}\nversion: "{version}"\nruntime: tool\n'.encode(),
            "greet.wasm": b"\0asm\x01\0\0\0" + marker,
            "assets/readme.txt": b"hi",
        }
    )


@pytest.fixture
def project(isolated):
    root = isolated / "work"
    (root / "murmur.yaml").write_text('name: cap\nversion: "0.1.0"\n')
    return root


def test_project_store_wins_over_global(project):
    install_zip(global_store(), tool(marker=b"global"))
    assert find_installed("greet", "0.1.0", project).scope == "global"
    install_zip(project_store(project), tool(marker=b"project"))
    inst = find_installed("greet", "0.1.0", project)
    assert inst.scope == "project"
    assert inst.zip_path == project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    assert inst.manifest.name == "greet" and inst.manifest.registry_runtime == "wasm"
    assert find_installed("greet", "9.9.9", project) is None
    assert find_installed("greet", "0.1.0", None).scope == "global"


def test_flipped_byte_in_a_store_is_e_reg_002(project):
    inst = install_zip(project_store(project), tool())
    raw = bytearray(inst.zip_path.read_bytes())
    raw[-30] ^= 0x20
    inst.zip_path.write_bytes(bytes(raw))
    with pytest.raises(MurError) as err:
        find_installed("greet", "0.1.0", project)
    assert err.value.code == "E-REG-002"
    assert err.value.message == "artifact integrity check failed for greet@0.1.0"


def test_lock_is_created_when_absent_then_only_verified(project):
    a = install_zip(project_store(project), tool())
    b = install_zip(project_store(project), tool(name="other"))
    check_lock_for_run(project, [a, b])
    lock = read_lock(lock_path(project))
    assert [(e.name, e.resolved_version, e.sha256) for e in lock.artifacts] == [
        ("greet", "0.1.0", a.sha256),
        ("other", "0.1.0", b.sha256),
    ]
    before = lock_path(project).read_bytes()
    check_lock_for_run(project, [a])  # verify only
    assert lock_path(project).read_bytes() == before

    c = install_zip(project_store(project), tool(name="third"))
    with pytest.raises(MurError) as err:
        check_lock_for_run(project, [a, c])
    assert err.value.code == "E-RUN-003"
    assert err.value.message == "murmur.lock missing artifact entry for 'third'"
    assert lock_path(project).read_bytes() == before  # never refreshed by run


def test_lock_version_mismatch_and_hash_mismatch(project):
    a = install_zip(project_store(project), tool())
    check_lock_for_run(project, [a])
    newer = install_zip(project_store(project), tool(version="0.2.0"))
    with pytest.raises(MurError) as err:
        check_lock_for_run(project, [newer])
    assert err.value.code == "E-RUN-003"
    assert err.value.message == "lockfile version mismatch for 'greet': manifest requested 0.2.0, lock pinned 0.1.0"

    changed = install_zip(project_store(project), tool(marker=b"rebuilt"))  # same name@version, new bytes
    with pytest.raises(MurError) as err:
        check_lock_for_run(project, [changed])
    assert err.value.render() == (
        "error[E-REG-002]: artifact integrity check failed for greet@0.1.0\n"
        "  hint: artifact on disk does not match murmur.lock \u2014 re-publish or delete the lock"
    )


def test_invalid_lock_is_e_run_003(project):
    a = install_zip(project_store(project), tool())
    lock_path(project).write_text("lock_version: 7\nartifacts: []\n")
    with pytest.raises(MurError) as err:
        check_lock_for_run(project, [a])
    assert err.value.code == "E-RUN-003"
    assert err.value.message == "invalid murmur.lock: unsupported lock_version 7 (expected 1)"


def test_extract_payload_wasm_native_static(project, tmp_path):
    inst = install_zip(project_store(project), tool())
    payload = extract_payload(inst, tmp_path / "stage-wasm")
    assert payload == tmp_path / "stage-wasm" / "greet.wasm"
    assert (tmp_path / "stage-wasm/assets/readme.txt").read_bytes() == b"hi"
    assert read_payload(inst) == ("greet.wasm", b"\0asm\x01\0\0\0")

    native = install_zip(
        project_store(project),
        zip_of(
            {
                "murmur.yaml": b'name: nt\nversion: "1"\nruntime: tool\nimplementation: native\n',
                "bin/nt": b"#!/bin/sh\necho native\n",
            }
        ),
    )
    path = extract_payload(native, tmp_path / "stage-native")
    assert path.name == "nt" and os.stat(path).st_mode & stat.S_IXUSR

    skill = install_zip(
        project_store(project),
        zip_of({"murmur.yaml": b'name: sk\nversion: "1"\nruntime: skill\n', "skill.md": b"# do"}),
    )
    assert extract_payload(skill, tmp_path / "stage-skill").read_bytes() == b"# do"


def test_extract_payload_rechecks_the_digest(project, tmp_path):
    inst = install_zip(project_store(project), tool())
    inst.zip_path.write_bytes(tool(marker=b"swapped after resolve"))
    with pytest.raises(MurError) as err:
        extract_payload(inst, tmp_path / "stage")
    assert err.value.code == "E-REG-002"
    assert not (tmp_path / "stage").exists()


def test_extract_payload_refuses_a_bad_wasm_shape(project, tmp_path):
    inst = install_zip(
        project_store(project),
        zip_of({"murmur.yaml": b'name: two\nversion: "1"\nruntime: tool\n', "a.wasm": b"a", "b.wasm": b"b"}),
    )
    with pytest.raises(MurError) as err:
        extract_payload(inst, tmp_path / "stage")
    assert err.value.render() == (
        "error[E-IO-003]: failed to read artifact archive for two@1: multiple root .wasm files found: a.wasm, b.wasm"
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("greet@0.1.0", VersionedRef("greet", "0.1.0")),
        ("greet", BareRef("greet")),
        ("./dist/greet-0.1.0.mur.zip", LocalFileRef("./dist/greet-0.1.0.mur.zip")),
        ("../x.mur.zip", LocalFileRef("../x.mur.zip")),
        ("/abs/x.mur.zip", LocalFileRef("/abs/x.mur.zip")),
        ("dist/greet-0.1.0.mur.zip", LocalFileRef("dist/greet-0.1.0.mur.zip")),
        ("greet-0.1.0.mur.zip", LocalFileRef("greet-0.1.0.mur.zip")),
        ("github:murmur-nexus/default-artifacts@v0.1.1", GitHubRef("murmur-nexus", "default-artifacts", "v0.1.1")),
    ],
)
def test_refs(text, expected):
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("a@b@c", "artifact reference must be in the format <name@version>"),
        ("@1.0", "artifact reference must be in the format <name@version>"),
        ("greet@", "artifact reference must be in the format <name@version>"),
        ("npm:left-pad", "unsupported artifact source prefix 'npm'"),
        ("github:owner/repo", "invalid github artifact reference 'github:owner/repo' (expected github:<owner>/<repo>@<tag>)"),
        ("  ", "artifact reference cannot be empty"),
    ],
)
def test_bad_refs(text, message):
    with pytest.raises(MurError) as err:
        parse_ref(text)
    assert err.value.code == "E-IO-003" and err.value.message == message
