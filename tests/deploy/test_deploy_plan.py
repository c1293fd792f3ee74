"""The release plan as data: layout under the target user's home, modes, phases, digests."""

from __future__ import annotations

import json

import pytest

from mur.deploy.plan import (
    ArtifactRef, BundleRef, FileRef, Layout, Mkdir, ReleaseInputs, Run, ServiceConfig, Symlink, Upload, WriteFile,
    activate_steps, artifact_verify_command, destroy_steps, listening_ports, parse_env_args, parse_env_text,
    pick_port, plan_release, prune_command, read_env_file, render_env_file, run_argv, start_steps, stop_steps,
)
from mur.errors import MurError

DEP = "dep_0123456789abcdef0123456789abcdef"


def inputs(home="/home/deployer", n=1, env=(("API_TOKEN", 'se"cr$et'),), prev=None, sudo=True, **svc) -> ReleaseInputs:
    return ReleaseInputs(
        dep_id=DEP, home=home, n=n,
        bundle=BundleRef("mur-0.1.0-linux-x86_64", "/cache/mur-0.1.0-linux-x86_64", "b" * 64, "0.1.0", 1000),
        manifest=FileRef("/src/murmur.yaml", "murmur.yaml", "m" * 64, 10),
        files=(FileRef("/src/prompts/sys.md", "prompts/sys.md", "p" * 64, 5),),
        workdir=(FileRef("/seed/tool.sh", "bin/tool.sh", "t" * 64, 3, 0o755),),
        artifacts=(ArtifactRef("greet", "1.0.0", (FileRef("/s/greet-1.0.0.mur.zip", "greet-1.0.0.mur.zip", "a" * 64, 7),
                                                   FileRef("/s/greet-1.0.0.sha256", "greet-1.0.0.sha256", "c" * 64, 64)),
                               "greet-1.0.0.mur.zip", "a" * 64),),
        service=ServiceConfig(**({"port": 23456, "env": env, "user": "deployer", "init": "systemd"} | svc)),
        sudo=sudo, prev_n=prev, capsule_name="hello", capsule_version="1.0.0")


def test_everything_lives_under_the_target_users_home():
    plan = plan_release(inputs())
    paths = [getattr(s, "dst", None) or getattr(s, "path", None) or getattr(s, "link", None) for s in plan.prepare]
    assert paths and all(p.startswith("/home/deployer/.murmur/") for p in paths)
    assert not any("/root" in p for p in paths)
    assert plan.release_dir == f"/home/deployer/.murmur/deployments/{DEP}/releases/1"


def test_the_env_file_is_private_and_the_bundle_executable():
    plan = plan_release(inputs())
    env = next(s for s in plan.prepare if isinstance(s, WriteFile) and s.dst.endswith("/env"))
    assert env.mode == 0o600
    assert read_env_file(env.content.decode()) == {"API_TOKEN": 'se"cr$et'}
    bundle = next(s for s in plan.prepare if isinstance(s, Upload) and s.dst.endswith("/bin/mur-0.1.0-linux-x86_64"))
    assert bundle.mode == 0o755 and bundle.sha256 == "b" * 64
    assert bundle.refs == "/home/deployer/.murmur/bin/.refs/mur-0.1.0-linux-x86_64"
    link = next(s for s in plan.prepare if isinstance(s, Symlink))
    assert link == Symlink("/home/deployer/.murmur/bin/mur-0.1.0-linux-x86_64", f"{plan.release_dir}/mur")


def test_artifacts_go_to_the_targets_global_store_with_their_digests():
    plan = plan_release(inputs())
    ups = [s for s in plan.prepare if isinstance(s, Upload) and "/artifacts/" in s.dst]
    assert [u.dst for u in ups] == ["/home/deployer/.murmur/artifacts/greet/1.0.0/greet-1.0.0.mur.zip",
                                    "/home/deployer/.murmur/artifacts/greet/1.0.0/greet-1.0.0.sha256"]
    cmd = artifact_verify_command(inputs())
    assert "a" * 64 + "  /home/deployer/.murmur/artifacts/greet/1.0.0/greet-1.0.0.mur.zip" in cmd
    assert cmd.endswith("sha256sum -c --quiet -")


def test_directories_come_before_the_files_in_them():
    plan = plan_release(inputs())
    made: set[str] = set()
    for step in plan.prepare:
        if isinstance(step, Mkdir):
            made.add(step.path)
        elif isinstance(step, (Upload, WriteFile)):
            parent = step.dst.rsplit("/", 1)[0]
            assert parent in made, f"{step.dst} written before {parent} is created"


def test_unchanged_files_are_linked_from_the_previous_release():
    plan = plan_release(inputs(n=3, prev=2))
    man = next(s for s in plan.prepare if isinstance(s, Upload) and s.dst.endswith("/releases/3/murmur.yaml"))
    assert man.alt.endswith("/releases/2/murmur.yaml")
    seed = next(s for s in plan.prepare if isinstance(s, Upload) and s.dst.endswith("workdir/bin/tool.sh"))
    assert seed.alt.endswith("/releases/2/workdir/bin/tool.sh") and seed.mode == 0o755


def test_digest_ignores_the_release_number_and_tracks_every_input():
    a, b = plan_release(inputs(n=1)), plan_release(inputs(n=7))
    assert a.digest == b.digest
    assert plan_release(inputs(env=(("API_TOKEN", "other"),))).digest != a.digest
    assert plan_release(inputs(env=(("API_TOKEN", "other"),))).capsule_digest == a.capsule_digest
    assert plan_release(inputs(port=1)).config_digest != a.config_digest
    # env values never appear in the metadata written next to the release
    assert "cr$et" not in json.dumps(a.release_meta)


def test_service_spec_and_argv_run_through_current():
    plan = plan_release(inputs(run_args=("--lifecycle-task-acceptance", "queue")))
    spec = plan.service_spec
    assert spec["release_dir"].endswith(f"{DEP}/current") and spec["port"] == 23456
    assert spec["user"] == "deployer" and spec["run_args"] == ["--lifecycle-task-acceptance", "queue"]
    argv = run_argv("/r", 5, "127.0.0.1", ("--x",))
    assert argv == ["/r/mur", "run", "--manifest", "/r/murmur.yaml", "--workdir", "/r/workdir", "--json",
                    "--bind", "127.0.0.1", "--port", "5", "--x"]


def test_systemd_activation_switches_current_then_restarts_with_sudo():
    lay = Layout("/home/deployer", DEP)
    steps = activate_steps(lay, 4, "systemd", sudo=True)
    assert steps[0] == Symlink("releases/4", lay.current)
    runs = [s for s in steps if isinstance(s, Run)]
    assert all(r.sudo for r in runs)
    assert "install -m 0644" in runs[0].cmd and lay.unit_path == f"/etc/systemd/system/mur-{DEP}.service"
    assert f"systemctl restart mur-{DEP}.service" in runs[1].cmd


def test_supervisor_start_is_detached_by_the_shell_and_idempotent():
    lay = Layout("/root", DEP)
    (start,) = start_steps(lay, "supervisor", sudo=False)
    assert "setsid -f" in start.cmd and "</dev/null" in start.cmd and "already running" in start.cmd
    assert not start.sudo
    (stop,) = stop_steps(lay, "supervisor", sudo=True)
    assert stop.sudo and not stop.check and "kill -TERM" in stop.cmd and "kill -KILL" in stop.cmd


def test_destroy_stops_removes_and_releases_shared_files():
    lay = Layout("/home/u", DEP)
    steps = destroy_steps(lay, "systemd", True, ["mur-0.1.0-linux-x86_64"], [("greet", "1.0.0")])
    text = "\n".join(s.cmd for s in steps)
    assert text.index("systemctl stop") < text.index("rm -f /etc/systemd/system/") < text.index(f"rm -rf {lay.root}")
    assert f".refs/mur-0.1.0-linux-x86_64/{DEP}" in text and f"greet/1.0.0/.refs/{DEP}" in text


def test_prune_keeps_the_listed_releases():
    cmd = prune_command(Layout("/h", DEP), [5, 4, 3])
    assert '" 3 4 5 "' in cmd and "rm -rf" in cmd


def test_env_args_and_files():
    assert parse_env_args(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(MurError) as err:
        parse_env_args(["NOEQUALS"])
    assert err.value.code == "E-DEPLOY-001" and 'must be KEY=VALUE' in err.value.message
    text = "# c\n\nexport A=1\nB='two words'\nC=\"q\"\n"
    assert parse_env_text(text, ".env") == {"A": "1", "B": "two words", "C": "q"}
    with pytest.raises(MurError):
        parse_env_text("1BAD=x\n", ".env")
    env = {"A": 'x "y" $HOME `cmd` \\ end', "B": ""}
    assert read_env_file(render_env_file(env).decode()) == env


def test_ports_are_stable_and_avoid_listeners():
    table = ("  sl  local_address rem_address   st\n"
             "   0: 0100007F:5BA0 00000000:0000 0A 00000000:00000000\n"
             "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000\n")
    assert listening_ports(table) == {0x5BA0}
    first = pick_port(DEP, set())
    assert pick_port(DEP, set()) == first and 20000 <= first < 40000
    assert pick_port(DEP, {first}) != first
    assert pick_port(DEP, set(), salt=1) != first
