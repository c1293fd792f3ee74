"""Whether a fleet's targets serve the same thing (mur.fleet.view, the line under `mur deploy ls`):
the same capsule content, whatever each provider calls its release."""

from __future__ import annotations

from mur.fleet.view import fleets, summary_line


def rec(target: str, provider: str, version: str, release: dict, dep: str) -> dict:
    return {"deployment_id": dep, "name": "hello", "version": version, "provider": provider,
            "target": {"host": "10.0.0.1"} if provider == "ssh" else {}, "release": release,
            "fleet": {"name": "hello", "target": target}, "updated_at": "2026-12-07T20:00:00Z"}


def host_release(n: int, capsule: str | None) -> dict:
    return {"n": n, "digest": f"rel{n}", **({"capsule_digest": capsule} if capsule else {})}


def docker_release(capsule: str) -> dict:
    return {"image": "mur-capsule-abc:123", "digest": "img", "capsule_digest": capsule}


A, B = "a" * 64, "b" * 64


def test_a_docker_and_a_host_target_serving_one_capsule_agree():
    """A Docker target's release is an image, a host's a number: they used to 'differ' with one capsule."""
    (group,) = fleets([rec("here", "local", "0.2.0", host_release(2, A), "dep_1"),
                       rec("box", "docker", "0.2.0", docker_release(A), "dep_2")])
    assert group["consistent"]
    assert summary_line(group).startswith(f"fleet hello: 0.2.0 (capsule {A[:12]}) on all 2 target(s)")


def test_release_numbers_that_drifted_apart_still_agree_and_equal_ones_name_the_release():
    """A host whose deploy once failed counts its releases one ahead: the same capsule all the same."""
    (group,) = fleets([rec("web-1", "ssh", "1.0.0", host_release(3, A), "dep_1"),
                       rec("web-2", "ssh", "1.0.0", host_release(2, A), "dep_2")])
    assert group["consistent"]
    (group,) = fleets([rec("web-1", "ssh", "1.0.0", host_release(2, A), "dep_1"),
                       rec("web-2", "ssh", "1.0.0", host_release(2, A), "dep_2")])
    assert summary_line(group).startswith("fleet hello: 1.0.0 (release 2) on all 2 target(s)")


def test_other_content_under_the_same_version_and_release_number_differs():
    (group,) = fleets([rec("web-1", "ssh", "1.0.0", host_release(2, A), "dep_1"),
                       rec("web-2", "ssh", "1.0.0", host_release(2, B), "dep_2")])
    assert not group["consistent"]
    assert summary_line(group) == (f"fleet hello: targets differ: 1.0.0 (capsule {A[:12]}) on web-1; "
                                   f"1.0.0 (capsule {B[:12]}) on web-2")


def test_records_without_a_capsule_digest_compare_by_version_and_release():
    (group,) = fleets([rec("web-1", "ssh", "1.0.0", host_release(1, None), "dep_1"),
                       rec("web-2", "ssh", "1.1.0", host_release(2, None), "dep_2")])
    assert summary_line(group) == "fleet hello: targets differ: 1.0.0 (release 1) on web-1; 1.1.0 (release 2) on web-2"
