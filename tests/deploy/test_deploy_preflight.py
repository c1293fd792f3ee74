"""Preflight: parsing target output, the refusal codes, and a real run against this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from mur.runtime.bundle import installed_runtime
from mur.resolve.shipped import ship
from mur.deploy.preflight import (
    Report, choose_init, containment_check, parse_df, parse_probe, parse_version, preflight_host, probe_command,
)
from mur.deploy.targets.local import LocalTarget
from mur.errors import MurError

SCOPED = {"achieved": "scoped", "mechanism": "landlock+seccomp", "tier": "full", "landlock_abi": 2}
ADVISORY = {"achieved": "advisory", "mechanism": "none", "tier": "environment-only", "landlock_abi": 0,
            "reason": "no Landlock"}


def capsule(tmp_path: Path, extra: str = "") -> Path:
    d = tmp_path / "cap"
    d.mkdir(exist_ok=True)
    (d / "capsule.wasm").write_bytes(b"\0asm")
    (d / "murmur.yaml").write_text(f"name: cap\nversion: \"1.0.0\"\n{extra}")
    return d / "murmur.yaml"


def test_parsers():
    assert parse_df("Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/vda 100 50 2048 50% /\n") == 2048 * 1024
    assert parse_df("garbage") is None
    assert parse_version("mur 0.4.9\n") == "0.4.9"
    assert parse_probe('warning: x\n{"achieved": "scoped"}\n') == {"achieved": "scoped"}
    with pytest.raises(MurError) as err:
        parse_probe("Segmentation fault")
    assert err.value.code == "E-DEPLOY-007"


def test_init_choice():
    assert choose_init("auto", systemd=True, privileged=True) == "systemd"
    assert choose_init("auto", systemd=True, privileged=False) == "supervisor"
    assert choose_init("auto", systemd=False, privileged=True) == "supervisor"
    assert choose_init("supervisor", systemd=True, privileged=True) == "supervisor"


def test_probe_is_cached_per_runtime_boot_and_user():
    cmd = probe_command("/h/.murmur/bin/mur-1-linux-x86_64", "ab" * 32, 1000)
    assert "/proc/sys/kernel/random/boot_id" in cmd and "abababababababab" in cmd and "-1000.json" in cmd
    assert "probe --json" in cmd


def test_unmet_floor_is_cap_003_with_the_target_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    inp = ship(capsule(tmp_path, "capabilities:\n  containment: scoped\n"))
    rep = Report("root@vm", "ssh")
    containment_check(rep, inp, ADVISORY)
    with pytest.raises(MurError) as err:
        rep.raise_if_failed()
    assert err.value.code == "E-CAP-003"
    assert err.value.message.startswith("declared containment class 'scoped' is not achievable on root@vm "
                                        "(achieved: 'advisory')")
    ok = Report("root@vm", "ssh")
    containment_check(ok, inp, SCOPED)
    ok.raise_if_failed()
    assert ok.containment["met"] and ok.containment["source"] == "manifest"


def test_sealed_is_never_met_and_other_failures_are_deploy_007(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    inp = ship(capsule(tmp_path, "capabilities:\n  containment: sealed\n"))
    rep = Report("t", "ssh")
    rep.add("disk", False, "1 MiB free, 100 MiB needed")
    containment_check(rep, inp, SCOPED)
    with pytest.raises(MurError) as err:
        rep.raise_if_failed()
    assert err.value.code == "E-DEPLOY-007" and "disk" in err.value.message and "containment" in err.value.message
    assert rep.to_dict()["ok"] is False and "✗ disk" in rep.render()


SHELL_NET = ("capabilities:\n  containment: scoped\n  shell:\n    allow: [bash]\n"
             "  network:\n    allow: [\"api.example.com:443\"]\n")


def test_scoped_shell_tools_with_network_allow_need_a_netns_on_the_target(tmp_path, monkeypatch):
    """A target whose probe could not make a network namespace is refused at preflight (E-CAP-003
    naming the namespace), not at the first session; able targets and old probes pass."""
    monkeypatch.setenv("HOME", str(tmp_path))
    inp = ship(capsule(tmp_path, SHELL_NET))
    rep = Report("deploy@vm", "ssh")
    containment_check(rep, inp, {**SCOPED, "netns": False, "userns": False})
    with pytest.raises(MurError) as err:
        rep.raise_if_failed()
    assert err.value.code == "E-CAP-003" and "network namespace" in err.value.message
    assert rep.containment["achieved"] == "advisory" and rep.containment["network_shortfall"] is True
    for probe in ({**SCOPED, "netns": True}, SCOPED):
        ok = Report("deploy@vm", "ssh")
        containment_check(ok, inp, probe)
        ok.raise_if_failed()
    # without shell tools, or without network.allow, no namespace is needed
    for extra in ("capabilities:\n  containment: scoped\n  network:\n    allow: [\"api.example.com:443\"]\n",
                  "capabilities:\n  containment: scoped\n  shell:\n    allow: [bash]\n"):
        other = ship(capsule(tmp_path, extra))
        fine = Report("deploy@vm", "ssh")
        containment_check(fine, other, {**SCOPED, "netns": False})
        fine.raise_if_failed()


def test_cli_flag_raises_the_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    inp = ship(capsule(tmp_path), containment="scoped")
    assert (inp.floor, inp.floor_source) == ("scoped", "cli")


def test_preflight_of_this_machine_with_the_installed_runtime(tmp_path, monkeypatch):
    """A real run: the runtime probes the real kernel through the same code path as on a VM."""
    monkeypatch.setenv("HOME", str(tmp_path))
    inp = ship(capsule(tmp_path))
    runtime = installed_runtime()
    rep = preflight_host(LocalTarget(), runtime, inp, dep_id="dep_" + "0" * 32, no_boot_hook=True)
    checks = {c.name: c for c in rep.checks}
    assert checks["runtime"].ok, checks["runtime"].detail
    assert rep.facts["runtime"]["version"] == runtime.version
    assert rep.probe["landlock_abi"] >= 0 and rep.facts["cgroup_mode"] in ("unified", "hybrid", "legacy", "none")
    assert rep.facts["init"] in ("systemd", "supervisor") and rep.ok
    assert rep.facts["boot"] in ("systemd", "none")
    cached = list((tmp_path / ".murmur" / "bin" / ".probe").iterdir())
    assert len(cached) == 1
