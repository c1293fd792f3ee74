"""A deployment's sessions read where it runs (mur.remote.sessions, here the local backend; the SFTP one
runs against a real sshd in integration/deploy/test_remote_access.py): listed across releases, oldest
first, nothing a link points at, addressed like local sessions; and `mur trace show|steps --deployment`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trace_events import T0, agent_session, sid

from mur.deploy.state import Deployment, DeploymentStore
from mur.deploy.targets import TargetSpec
from mur.errors import MurError
from mur.remote.sessions import LocalSessions, SessionRef, open_sessions, pick

DEP = "dep_0196a0a0a0a07000800000000000abcd"


def releases(home: Path) -> Path:
    return home / ".murmur" / "deployments" / DEP / "releases"


def put(home: Path, release: int, n: int, events: list[dict] | None = None) -> Path:
    d = releases(home) / str(release) / "workdir" / sid(n)
    d.mkdir(parents=True)
    text = "".join(json.dumps(e) + "\n" for e in (events or agent_session(sid(n), T0 + n, [[("bash", "ok", 10)]])))
    (d / "trace.jsonl").write_text(text)
    return d


@pytest.fixture
def deployed(home):
    DeploymentStore().save(Deployment(DEP, "local", TargetSpec("local"), name="hello", home=str(home), status="running"))
    put(home, 1, 1)
    put(home, 2, 3)
    put(home, 2, 2)
    return home


def test_sessions_across_releases_oldest_first_and_no_link_followed(deployed, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "trace.jsonl").write_text("not yours\n")
    os.symlink(secret, releases(deployed) / "2" / "workdir" / sid(9))  # a linked session directory
    os.symlink(releases(deployed) / "1", releases(deployed) / "7")  # a linked release
    linked = releases(deployed) / "2" / "workdir" / sid(8)
    linked.mkdir()
    os.symlink(secret / "trace.jsonl", linked / "trace.jsonl")  # a linked trace
    s = LocalSessions(str(releases(deployed)))
    refs = s.list()
    assert [r.session_id for r in refs] == [sid(1), sid(2), sid(3)]
    assert [r.release for r in refs] == [1, 2, 2]
    assert s.read(refs[0]).startswith(b'{"event_type": "task_start"')
    with pytest.raises(OSError):
        s.read(SessionRef(sid(8), 2, f"2/workdir/{sid(8)}/trace.jsonl"))


def test_reads_from_an_offset(deployed):
    s = LocalSessions(str(releases(deployed)))
    ref = s.list()[-1]
    whole = s.read(ref)
    assert s.size(ref) == len(whole) and s.read(ref, 10, 5) == whole[10:15] and s.read(ref, len(whole)) == b""


def test_addresses_as_for_local_sessions():
    refs = [SessionRef(sid(n), 1, f"1/workdir/{sid(n)}/trace.jsonl") for n in (1, 2, 3)]
    assert pick(None, refs, "x") == refs[-1] and pick("@3", refs, "x") == refs[0]
    assert pick(sid(2)[-6:], refs, "x") == refs[1] and pick(sid(2).upper(), refs, "x") == refs[1]
    for address, words in (("@4", "matched no session: x holds 3"), ("@0", "@N counts from @1"),
                           ("000", "matched no session in x"), ("ffff", "matched no session in x"),
                           ("bcde000", "matched no session"), ("e3", "matched no session"),  # any suffix length
                           ("workdir/ses_x/trace.jsonl", "is a path")):
        with pytest.raises(MurError) as info:
            pick(address, refs, "x")
        assert info.value.code == "E-TRC-002" and words in info.value.message, (address, info.value.message)
    with pytest.raises(MurError) as info:
        pick("e3000", [SessionRef("ses_" + "0" * 27 + "e3000", 1, ""), SessionRef("ses_" + "1" * 27 + "e3000", 1, "")], "x")
    assert "matched 2 sessions" in info.value.message


def test_trace_show_and_steps_with_deployment(deployed, cli):
    code, out, err = cli("trace", "steps", "--deployment", DEP[:12], "@2")
    assert code == 0, err
    assert out.startswith(f"Session {sid(2)}  (2 turns)")
    code, out, err = cli("trace", "show", "-d", DEP, "--json")
    summary = json.loads(out)
    assert summary["session_id"] == sid(3)
    assert summary["trace"] == f"{releases(deployed)}/2/workdir/{sid(3)}/trace.jsonl"
    code, out, err = cli("trace", "show", "-d", "hello", "--json")  # the capsule name `mur deploy ls` shows
    assert code == 0 and json.loads(out)["session_id"] == sid(3), err
    code, out, err = cli("trace", "show", "-d", DEP, "--workdir", "x")
    assert code == 2 and "give --deployment, or --workdir / --manifest, not both" in err


def test_a_deployment_without_sessions_or_unknown(home, cli):
    DeploymentStore().save(Deployment(DEP, "local", TargetSpec("local"), home=str(home)))
    code, out, err = cli("trace", "show", "-d", DEP)
    assert code == 1 and err.startswith("error[E-TRC-002]: session address '@1' matched no session")
    assert "has served no session yet" in err
    code, out, err = cli("trace", "steps", "-d", "dep_nope")
    assert code == 1 and err.startswith("error[E-DEPLOY-008]")


def test_a_broken_trace_is_e_trc_001(deployed, cli):
    put(deployed, 3, 4, events=[])
    (releases(deployed) / "3" / "workdir" / sid(4) / "trace.jsonl").write_text("{not json\n")
    code, out, err = cli("trace", "show", "-d", DEP)
    assert code == 1 and err.startswith("error[E-TRC-001]: ") and f"{sid(4)}/trace.jsonl: line 1" in err


def test_docker_deployments_say_where_to_read_instead(home):
    dep = Deployment(DEP, "docker", TargetSpec("docker"), home="/")
    with pytest.raises(MurError) as info, open_sessions(dep):
        pass
    assert info.value.code == "E-TRC-002" and "runs on docker" in info.value.message
