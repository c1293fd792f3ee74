"""Containment: the declared floor (strongest of manifest, config, CLI), the achieved class, E-CAP-003.

Pure functions are driven with fake probes (every host kind, no kernel needed); `prepare()` is driven
in-process with a fake advisory probe to see the spec's exact refusal before any workdir exists; the
real probe is checked end to end on this host.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from manifest_support import ADVISORY_LINUX, ADVISORY_MACOS, NO_NETNS_HOST, SCOPED_HOST, SEALED_HOST
from mur.errors import MurError
from mur.manifest.containment import (
    NETWORK_SHORTFALL,
    SCOPED_SHORTFALL,
    SEALED_SHORTFALL,
    UNIX_SOCKETS_VIEW,
    achieved_class,
    check_floor,
    effective_floor,
    shortfall_reason,
)
from mur.sandbox.scope import render_scope_report, scope_report
from mur.manifest import parse_capsule
from mur.sandbox.probe import classify

CLASSES = ("advisory", "scoped", "sealed")
RANK = {c: i for i, c in enumerate(CLASSES)}

# The spec's example, verbatim (section "Containment class", "Refusal").
SPEC_REFUSAL = (
    "error[E-CAP-003]: declared containment class 'scoped' is not achievable on this host (achieved: "
    "'advisory'): scoped requires Landlock filesystem mediation (Linux 5.13+ with a usable Landlock ABI); "
    "this host provides no kernel filesystem mediation, so paths outside the workdir are constrained by "
    "convention only\n"
    "  hint: lower the declared floor to 'advisory' (capabilities.containment in murmur.yaml, containment "
    "in .murmur/config.yaml, or --containment), or run on a host that provides 'scoped'"
)


@pytest.mark.parametrize("manifest, config, cli", itertools.product((None, *CLASSES), repeat=3))
def test_floor_is_the_strongest_declared_and_defaults_to_advisory(manifest, config, cli):
    floor = effective_floor(manifest, config, cli)
    declared = [v for v in (manifest, config, cli) if v is not None]
    assert floor.declared == (max(declared, key=RANK.__getitem__) if declared else "advisory")
    # a CLI flag (or a config default) can raise the floor, never lower it
    if manifest is not None:
        assert RANK[floor.declared] >= RANK[manifest]
    # the credited source really declared that class
    if declared:
        assert {"manifest": manifest, "config": config, "cli": cli}[floor.source] == floor.declared
    else:
        assert floor.source == "default"


@pytest.mark.parametrize("probe", [SEALED_HOST, SCOPED_HOST, ADVISORY_LINUX, ADVISORY_MACOS])
@pytest.mark.parametrize("declared", CLASSES)
@pytest.mark.parametrize("workdir_exec", [False, True])
def test_achieved_class_and_refusal(probe, declared, workdir_exec):
    achieved = achieved_class(probe, workdir_exec)
    assert achieved == ("advisory" if workdir_exec else probe.achieved)
    floor = effective_floor(declared, None, None)
    if RANK[achieved] >= RANK[declared]:
        assert check_floor(floor, probe, workdir_exec) == achieved
        assert shortfall_reason(declared, achieved, workdir_exec) is None
    else:
        with pytest.raises(MurError) as err:
            check_floor(floor, probe, workdir_exec)
        assert err.value.code == "E-CAP-003"
        assert err.value.message.startswith(
            f"declared containment class '{declared}' is not achievable on this host (achieved: '{achieved}'): ")
        assert err.value.hint == (
            f"lower the declared floor to '{achieved}' (capabilities.containment in murmur.yaml, containment in "
            f".murmur/config.yaml, or --containment), or run on a host that provides '{declared}'")
        if workdir_exec:
            assert "workdir_exec" in err.value.message
        elif declared == "sealed":  # the precise blocker the probe found
            assert SEALED_SHORTFALL + ": " in err.value.message
        else:
            assert err.value.message.endswith(SCOPED_SHORTFALL)


def test_sealed_is_achieved_where_the_probe_built_and_verified_the_composed_root():
    floor = effective_floor("sealed", None, None)
    assert check_floor(floor, SEALED_HOST, False) == "sealed"
    with pytest.raises(MurError) as err:
        check_floor(floor, SCOPED_HOST, False)
    assert err.value.message.endswith(f"{SEALED_SHORTFALL}: {SCOPED_HOST.sealed_reason}")
    # what a capsule does can still cap it: an executable workdir, a socket on the host
    assert achieved_class(SEALED_HOST, True) == "advisory"
    assert achieved_class(SEALED_HOST, False, view_short=UNIX_SOCKETS_VIEW) == "scoped"
    with pytest.raises(MurError) as err:
        check_floor(floor, SEALED_HOST, False, view_short=UNIX_SOCKETS_VIEW)
    assert "unix_sockets: true" in err.value.message


def test_spec_refusal_text_on_a_host_without_landlock():
    with pytest.raises(MurError) as err:
        check_floor(effective_floor("scoped", None, None), ADVISORY_LINUX, False)
    assert err.value.render() == SPEC_REFUSAL


def test_prepare_refuses_before_any_workdir_on_a_host_without_landlock(project, monkeypatch):
    """`mur run` pre-checks with a fake non-Landlock probe: the spec's refusal, nothing created."""
    from mur.session import prechecks
    from mur.session.options import RunOptions

    home, proj = project
    (proj / "murmur.yaml").write_text(
        'name: c\nversion: "0.1.0"\nartifacts:\n  - {name: not-installed, version: "1.0.0"}\n'
        "capabilities:\n  containment: scoped\n")
    monkeypatch.setattr(prechecks, "probe", lambda: ADVISORY_LINUX)
    with pytest.raises(MurError) as err:
        prechecks.prepare(RunOptions(manifest=Path("murmur.yaml")))
    # E-CAP-003 comes before the registry/store lookup that would say E-RUN-008
    assert err.value.render() == SPEC_REFUSAL
    assert sorted(p.name for p in proj.iterdir()) == ["murmur.yaml"]
    # and the same manifest explains (exit 0 path) on that host
    report = prechecks.explain(RunOptions(manifest=Path("murmur.yaml"), explain_scope=True))
    assert {k: report[k] for k in ("declared_containment", "declared_source", "achieved_containment", "floor_met",
                                   "shortfall_reason", "enforcement_tier", "network_isolation",
                                   "process_isolation")} == {
        "declared_containment": "scoped", "declared_source": "manifest", "achieved_containment": "advisory",
        "floor_met": False, "shortfall_reason": SCOPED_SHORTFALL, "enforcement_tier": "seccomp-only",
        "network_isolation": "no-inet-sockets", "process_isolation": "session-uid"}


def test_human_report_layout_for_the_spec_example():
    """The spec's `--explain-scope` example (a host without Landlock, a sealed floor)."""
    capsule = parse_capsule(
        'name: c\nversion: "1"\ncapabilities:\n  containment: sealed\n  network:\n    allow: [https://api.anthropic.com]\n'
        "  shell:\n    allow: [python3]\n    interpreter_runtime:\n"
        "      - {binary: python3, dirs: [{path: /usr/lib/python3.11, list_dir: true}]}\n", env={}).capsule
    report = scope_report(capsule, effective_floor("sealed", None, None), ADVISORY_MACOS)
    assert render_scope_report(report) == (
        "Containment\n"
        "  declared:  sealed\n"
        "  source:    capabilities.containment in murmur.yaml\n"
        "  achieved:  advisory\n"
        "  floor met: no\n"
        "  reason:    sealed requires mount-namespace + pivot_root isolation (the tools in a root built for the "
        "session), which this host cannot provide: no mount namespace for the session on this (pretend) host\n"
        "  mechanism: none\n"
        "  network:   unenforced (no kernel enforcement on this host)\n"
        "  processes: unenforced (no kernel enforcement on this host)\n"
        "  view:      host (the host's tree; metadata outside the grants stays readable)\n"
        "  disk:      10737418240 bytes, watcher (mur's watcher sums st_blocks of every inode at a fixed "
        "interval (not kernel-counted))\n"
        "             why not kernel-counted: no kernel enforcement on this host\n"
        "\n"
        "Effective grants\n"
        "  filesystem scope: <none>\n"
        "  network allow:\n"
        "    - https://api.anthropic.com\n"
        "  unix sockets:     false\n"
        "  shell allow:\n"
        "    - python3\n"
        "  spawn allow: <none>\n"
        "  env allow: <none>\n"
        "  interpreter runtime:\n"
        "    - python3: /usr/lib/python3.11 (list_dir)\n"
        "\n"
        "This is a report only — `mur run` without --explain-scope would refuse to launch here.\n"
    )


SHELL_NET = ('name: c\nversion: "1"\ncapabilities:\n  containment: {floor}\n  network:\n'
             "    allow: [https://api.example.com]\n  shell:\n    allow: [curl]\n")


def test_a_scoped_floor_is_refused_where_no_network_namespace_carries_network_allow():
    """Hosts, not ports: never silently fall back to Landlock's port rules under a scoped floor."""
    capsule = parse_capsule(SHELL_NET.format(floor="scoped"), env={}).capsule
    c = scope_report(capsule, effective_floor("scoped", None, None), NO_NETNS_HOST)
    assert (c["achieved_containment"], c["floor_met"], c["shortfall_reason"]) == ("advisory", False, NETWORK_SHORTFALL)
    assert (c["enforcement_tier"], c["network_isolation"], c["process_isolation"]) == (
        "landlock+seccomp", "landlock-tcp-ports", "landlock-scope+seccomp")
    with pytest.raises(MurError) as err:
        check_floor(effective_floor("scoped", None, None), NO_NETNS_HOST, False, True)
    assert err.value.render().startswith(
        "error[E-CAP-003]: declared containment class 'scoped' is not achievable on this host (achieved: "
        "'advisory'): scoped confines the network.allow of a capsule that spawns subprocesses")
    # the same capsule on a host with the namespace: met, and the report says how
    ok = scope_report(capsule, effective_floor("scoped", None, None), SCOPED_HOST)
    assert (ok["floor_met"], ok["network_isolation"], ok["process_isolation"]) == (
        True, "netns+egress-proxy", "session-uid")


def test_lower_floors_and_capsules_without_the_need_are_not_refused():
    advisory = parse_capsule(SHELL_NET.format(floor="advisory"), env={}).capsule
    report = scope_report(advisory, effective_floor("advisory", None, None), NO_NETNS_HOST)
    assert report["floor_met"] and report["network_isolation"] == "landlock-tcp-ports"  # the documented fallback
    no_net = parse_capsule('name: c\nversion: "1"\ncapabilities:\n  containment: scoped\n'
                           "  shell:\n    allow: [bash]\n", env={}).capsule
    assert scope_report(no_net, effective_floor("scoped", None, None), NO_NETNS_HOST)["floor_met"]
    no_shell = parse_capsule('name: c\nversion: "1"\ncapabilities:\n  containment: scoped\n'
                             "  network:\n    allow: [https://api.example.com]\n", env={}).capsule
    assert scope_report(no_shell, effective_floor("scoped", None, None), NO_NETNS_HOST)["floor_met"]


def test_a_scoped_floor_is_refused_where_subprocesses_could_signal_any_process_of_murs_uid():
    """Not root (no session uid), no user namespace (no pid namespace), Landlock ABI < 6 (no signal
    scope): the tools could signal mur itself. Never silently, under a scoped floor (E-CAP-003)."""
    from mur.manifest.containment import PROCESS_SHORTFALL

    bare = classify("linux", 5, True, None, "hybrid", True, False, root=False, netns=False, userns=False)
    no_net = parse_capsule('name: c\nversion: "1"\ncapabilities:\n  containment: scoped\n'
                           "  shell:\n    allow: [bash]\n", env={}).capsule
    c = scope_report(no_net, effective_floor("scoped", None, None), bare)
    assert (c["achieved_containment"], c["floor_met"], c["shortfall_reason"], c["process_isolation"]) == (
        "advisory", False, PROCESS_SHORTFALL, "seccomp-only")
    assert "could signal mur and every other process of that uid" in PROCESS_SHORTFALL
    # what stands in for it: Landlock's signal scope (ABI 6), a user namespace, root's session uid
    for able in (classify("linux", 6, True, None, "hybrid", True, False, root=False, netns=False, userns=False),
                 classify("linux", 5, True, None, "hybrid", True, False, root=False, netns=True, userns=True),
                 classify("linux", 5, True, None, "hybrid", True, False, root=True, netns=True)):
        assert scope_report(no_net, effective_floor("scoped", None, None), able)["floor_met"], able
    advisory = scope_report(no_net, effective_floor("advisory", None, None), bare)
    assert advisory["floor_met"]  # below scoped: runs, and W-SEC-005 says a tool can signal mur's processes


@pytest.mark.requires_landlock
def test_real_probe_on_this_host_achieves_what_it_verified():
    """The achieved class comes from applying a real Landlock ruleset, and building the composed
    root, in forked children: sealed here when that root was built, else scoped with the blocker."""
    from mur.sandbox.probe import probe_host

    host = probe_host(refresh=True)
    assert host.tier == "full" and host.landlock_abi >= 1
    floor = effective_floor(None, None, "sealed")
    if host.sealed:
        assert (host.achieved, host.mechanism) == ("sealed", "mountns+pivot_root+landlock+seccomp")
        assert check_floor(floor, host, False) == "sealed" and host.sealed_reason is None
    else:
        assert (host.achieved, host.mechanism) == ("scoped", "landlock+seccomp") and host.sealed_reason
        with pytest.raises(MurError) as err:
            check_floor(floor, host, False)
        assert "(achieved: 'scoped')" in err.value.message and host.sealed_reason in err.value.message
