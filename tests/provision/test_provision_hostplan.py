"""Host facts in, changes out: deploy/host/mur-host.sh's kernel decisions (run for real on fake
facts) and mur.provision.hostplan's full plan; a prepared host plans nothing."""

from __future__ import annotations

import subprocess

import pytest

from mur.provision import assets
from mur.provision.hostplan import HostState, kernel_lines, parse_state, plan, state_command
from mur.provision.userdata import UserDataInputs, marker

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXkx ci@mur"
GOOD = {"os_id": "debian", "os_version": "12", "kernel": "6.1.0-37-cloud-amd64", "arch": "x86_64",
        "lsm": "landlock,lockdown,yama,apparmor", "landlock_config": "y", "landlock_abi": "2", "cgroup": "unified",
        "systemd": "yes", "grub": "yes", "cmdline_fix": "no", "packages_missing": "", "kernels_installed": "6.1",
        "reboot_pending": "no"}


def facts(**kw) -> dict[str, str]:
    return {**GOOD, **kw}


def ids(lines):
    return [ln.split("|")[0] for ln in lines]


def test_a_good_debian_12_host_needs_nothing_from_the_kernel():
    assert kernel_lines(facts(), "keep") == []


@pytest.mark.parametrize("kw,why", [
    ({"os_id": "ubuntu", "os_version": "24.04"}, "unsupported distribution ubuntu 24.04"),
    ({"os_version": "11"}, "unsupported distribution debian 11"),
    ({"arch": "aarch64"}, "unsupported architecture aarch64"),
    ({"systemd": "no"}, "systemd is not running"),
])
def test_unsupported_hosts_are_refused(kw, why):
    (line,) = kernel_lines(facts(**kw), "keep")
    assert line.startswith("refuse|-|") and why in line


def test_hybrid_cgroups_need_the_command_line_and_a_reboot():
    assert kernel_lines(facts(cgroup="hybrid"), "keep") == [
        "cmdline|yes|kernel command line: cgroup v2 only (now hybrid) (/etc/default/grub.d/mur.cfg, update-grub)"]


def test_landlock_missing_from_the_lsm_list_is_a_command_line_fix():
    (line,) = kernel_lines(facts(lsm="lockdown,yama,apparmor"), "keep")
    assert line.startswith("cmdline|yes|") and "Landlock in the active LSM list" in line


def test_a_kernel_without_landlock_gets_the_newer_distribution_kernel():
    (line,) = kernel_lines(facts(landlock_config="n", lsm="lockdown,yama"), "keep")
    assert line == "kernel-6.12|yes|install linux-image-6.12-cloud-amd64 (kernel 6.12, Landlock ABI 6) and boot it"


def test_choosing_6_12_installs_it_once_then_only_boots_it():
    assert ids(kernel_lines(facts(), "6.12")) == ["kernel-6.12"]
    (line,) = kernel_lines(facts(kernels_installed="6.1,6.12"), "6.12")
    assert line.startswith("kernel-6.12|yes|boot the installed")
    assert kernel_lines(facts(kernel="6.12.57+deb12-cloud-amd64", kernels_installed="6.1,6.12"), "6.12") == []


def test_no_grub_means_the_command_line_cannot_be_fixed_here():
    (line,) = kernel_lines(facts(cgroup="hybrid", grub="no"), "keep")
    assert line.startswith("refuse|-|") and "does not boot through GRUB" in line


def test_a_written_fix_waiting_for_its_reboot_plans_only_the_reboot():
    assert ids(kernel_lines(facts(cgroup="hybrid", cmdline_fix="yes"), "keep")) == ["reboot"]
    assert ids(kernel_lines(facts(reboot_pending="yes"), "keep")) == ["reboot"]


def test_missing_packages_come_first_and_need_no_reboot():
    assert kernel_lines(facts(packages_missing="sudo,python3"), "keep") == ["packages|no|install sudo python3"]


def test_the_script_reads_this_machine(tmp_path):
    out = subprocess.run(["sh", str(assets.path("host/mur-host.sh")), "facts"], capture_output=True, text=True,
                         check=True).stdout
    got = dict(line.split("=", 1) for line in out.splitlines())
    assert set(GOOD) <= set(got)
    assert got["cgroup"] in ("unified", "hybrid", "legacy", "none")


# --- the whole plan -------------------------------------------------------------------------


def prepared_state(inp: UserDataInputs) -> HostState:
    files = {f.dest: (f.sha256(), f"{f.mode:o} root:root") for f in assets.HOST_FILES}
    return HostState(facts=facts(), group=True, user=True, in_group=True, home=f"/home/{inp.deploy_user}",
                     keys=(KEY,), files=files, marker=marker(inp))


INP = UserDataInputs(ssh_authorized_keys=(KEY,), deploy_user="deployer")


def test_a_prepared_host_plans_nothing():
    p = plan(prepared_state(INP), INP)
    assert p.changes == [] and p.refused is None and not p.reboot


def test_a_bare_host_plans_every_change_in_order():
    bare = HostState(facts=facts(packages_missing="sudo", cgroup="hybrid"))
    p = plan(bare, INP)
    got = [c.id for c in p.changes]
    assert got == ["packages", "group", "user", "keys", "file:/etc/sudoers.d/mur-deploy",
                   "file:/etc/systemd/system/user@.service.d/mur-delegate.conf",
                   "file:/etc/systemd/system/mur-.service.d/mur-delegate.conf",
                   "file:/usr/local/lib/mur/mur-host.sh", "file:/usr/local/lib/mur/mur-cmdline.cfg",
                   "file:/usr/local/lib/mur/mur-deploy-helper", "marker", "cmdline"]
    assert p.reboot


def test_a_changed_file_a_wrong_mode_and_a_missing_key_are_each_one_change():
    s = prepared_state(INP)
    s.files["/etc/sudoers.d/mur-deploy"] = (assets.SUDOERS.sha256(), "644 root:root")
    s.files["/usr/local/lib/mur/mur-host.sh"] = ("0" * 64, "755 root:root")
    s.keys = ("ssh-ed25519 AAAAother other@x",)
    s.in_group = False
    p = plan(s, INP)
    assert [c.id for c in p.changes] == ["user-group", "keys", "file:/etc/sudoers.d/mur-deploy",
                                         "file:/usr/local/lib/mur/mur-host.sh"]
    assert all(c.what.startswith(("add ", "authorize ", "update ")) for c in p.changes)


def test_keys_with_options_or_other_comments_count_as_present():
    s = prepared_state(INP)
    s.keys = ('from="10.0.0.1" ' + KEY.replace("ci@mur", "laptop"),)
    assert plan(s, INP).changes == []


def test_a_refused_host_plans_no_change():
    p = plan(HostState(facts=facts(os_id="fedora", os_version="40")), INP)
    assert p.changes == [] and "fedora" in p.refused


def test_the_state_command_round_trips_through_a_real_shell(tmp_path):
    # run the state command here (as whoever runs the tests) and parse what it prints
    res = subprocess.run(["sh", "-c", state_command("nobody-mur-test", assets.read_text("host/mur-host.sh"))],
                         capture_output=True, text=True)
    s = parse_state(res.stdout)
    assert s.facts["os_id"] and not s.user and s.keys == () and s.marker == ""
