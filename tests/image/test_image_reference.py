"""Image references: typos are E-IMG-004 before any engine is asked."""

from __future__ import annotations

import pytest

from mur.errors import MurError
from mur.image.reference import default_tag, parse_ref


@pytest.mark.parametrize("ref,registry,repo,tag", [
    ("hello", "", "hello", "latest"),
    ("hello:0.1.0", "", "hello", "0.1.0"),
    ("team/hello:1", "", "team/hello", "1"),
    ("127.0.0.1:5000/hello:0.1.0", "127.0.0.1:5000", "127.0.0.1:5000/hello", "0.1.0"),
    ("localhost/a/b", "localhost", "localhost/a/b", "latest"),
    ("registry.example.com/x_y/z-w:v1.2_3", "registry.example.com", "registry.example.com/x_y/z-w", "v1.2_3"),
])
def test_valid(ref, registry, repo, tag):
    r = parse_ref(ref)
    assert (r.registry, r.repository, r.tag) == (registry, repo, tag)
    assert str(r) == f"{repo}:{tag}"


@pytest.mark.parametrize("ref", ["", "Hello", "a b", "hello:", ":tag", "hello:-x", "a//b", "127.0.0.1:5000/", "x@y"])
def test_invalid(ref):
    with pytest.raises(MurError) as err:
        parse_ref(ref)
    assert err.value.code == "E-IMG-004" and "[HOST[:PORT]/]NAME[:TAG]" in err.value.hint


def test_default_tag_is_a_valid_reference():
    assert default_tag("hello", "0.1.0") == "mur-hello:0.1.0"
    assert parse_ref(default_tag("My Capsule!", "1.0.0+build/7"))
