"""The release plan as data: layout under the target user's home, modes, phases, digests."""

from __future__ import annotations

import json

import pytest

from mur.deploy.env import read_env_file, render_env_file
from mur.resolve.env import parse, parse_env_args
from mur.deploy.init import init_for, run_argv
from mur.deploy.cleanup import destroy_steps, gc_shared_command, prune_command, sweep_command
from mur.deploy.plan import (
    ReleaseInputs, activate_steps, artifact_verify_command, choose_port, listening_ports, pick_port, plan_release,
)
from mur.deploy.steps import (
    BundleRef, FileRef, Layout, Mkdir, Run, ServiceConfig, Symlink, Tls, Upload, WriteFile,
)
from mur.errors import MurError
from mur.resolve.shipped import ArtifactRef

DEP = "dep_0123456789abcdef0123456789abcdef"


def inputs(home="/home/deployer", n=1, env=(("API_TOKEN", 'se"cr$et'),), prev=None, sudo=True, token=b"",
           tls_files=None, **svc) -> ReleaseInputs:
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
        sudo=sudo, prev_n=prev, capsule_name="hello", capsule_version="1.0.0", token=token, tls=tls_files, nonce="n0nce")


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
    assert link == Symlink("/home/deployer/.murmur/bin/mur-0.1.0-linux-x86_64", f"{plan.stage_dir}/mur")


def test_a_release_is_built_in_staging_and_exists_only_once_complete():
    plan = plan_release(inputs())
    stage = plan.stage_dir
    assert stage == f"/home/deployer/.murmur/staging/{DEP}/release-1-n0nce"
    files = [s for s in plan.prepare if isinstance(s, (Upload, WriteFile))]
    own = [f for f in files if not f.dst.startswith(("/home/deployer/.murmur/bin/", "/home/deployer/.murmur/artifacts/"))
           and f.dst != plan.layout.boot_script]
    assert own and all(f.dst.startswith(stage + "/") for f in own)  # nothing of it under releases/ yet
    assert files[-1].dst == f"{stage}/release.json"  # written last
    assert json.loads(files[-1].content)["nonce"] == "n0nce"
    cmd = plan.commit.cmd
    # every file fsynced, then one rename into releases/: a release directory is always complete
    assert cmd.index("test -f") < cmd.index("-exec sync") < cmd.index(f"mv -T {stage} {plan.release_dir}")
    # shared files are copied through this deploy's scratch directory, never beside the shared file
    shared = [f for f in files if isinstance(f, Upload) and f.refs]
    assert shared and all(f.scratch == f"/home/deployer/.murmur/staging/{DEP}/shared-n0nce" for f in shared)


def test_each_release_has_its_own_material():
    cert, key = FileRef("/k/cert.pem", "cert.pem", "c" * 64, 9), FileRef("/k/key.pem", "key.pem", "k" * 64, 9)
    plan = plan_release(inputs(token=b"tok", tls_files=Tls(cert, key, "p" * 64), tls=True, tls_pin="p" * 64))
    by_dst = {s.dst: s for s in plan.prepare if isinstance(s, (Upload, WriteFile))}
    stage, final = plan.stage_dir, plan.release_dir
    assert by_dst[f"{stage}/a2a-token"].mode == 0o600 and by_dst[f"{stage}/tls/key.pem"].mode == 0o600
    assert f"{stage}/tls/cert.pem" in by_dst and f"{stage}/env" in by_dst
    assert not any(d.startswith(plan.layout.root + "/") and "/releases/" not in d for d in by_dst)  # none shared
    env = plan.service_spec["env"]
    assert env["MURMUR_A2A_TOKEN_FILE"] == f"{final}/a2a-token"
    assert env["MURMUR_A2A_TLS_CERT"] == f"{final}/tls/cert.pem" and env["MURMUR_A2A_TLS_KEY"] == f"{final}/tls/key.pem"
    unit = by_dst[f"{stage}/{plan.layout.unit_name}"].content.decode()
    assert f"WorkingDirectory={final}\n" in unit and f"ExecStart={final}/mur run" in unit and "/current" not in unit


def test_artifacts_go_to_the_targets_global_store_with_their_digests():
    plan = plan_release(inputs())
    ups = [s for s in plan.prepare if isinstance(s, Upload) and "/artifacts/" in s.dst]
    assert [u.dst for u in ups] == ["/home/deployer/.murmur/artifacts/greet/1.0.0/greet-1.0.0.mur.zip",
                                    "/home/deployer/.murmur/artifacts/greet/1.0.0/greet-1.0.0.sha256"]
    inp = inputs()
    cmd = artifact_verify_command(Layout(inp.home, DEP), inp.artifacts)
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
    man = next(s for s in plan.prepare if isinstance(s, Upload) and s.dst == f"{plan.stage_dir}/murmur.yaml")
    assert man.alt.endswith("/releases/2/murmur.yaml")
    seed = next(s for s in plan.prepare if isinstance(s, Upload) and s.dst.endswith("/work/bin/tool.sh"))
    assert seed.alt.endswith("/releases/2/work/bin/tool.sh") and seed.mode == 0o755


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
    assert argv == ["/r/mur", "run", "--manifest", "/r/murmur.yaml", "--workdir", "/r/work", "--json",
                    "--bind", "127.0.0.1", "--port", "5", "--x"]


def test_systemd_activation_switches_current_then_restarts_with_sudo():
    lay = Layout("/home/deployer", DEP)
    steps = activate_steps(lay, 4, ServiceConfig(port=1, init="systemd", boot="systemd"), sudo=True)
    assert steps[0] == Symlink("releases/4", lay.current)
    runs = [s for s in steps if isinstance(s, Run)]
    assert all(r.sudo for r in runs)
    assert "install -m 0644" in runs[0].cmd and lay.unit_path == f"/etc/systemd/system/mur-{DEP}.service"
    assert f"systemctl restart mur-{DEP}.service" in runs[1].cmd


def test_supervisor_start_is_detached_by_the_shell_and_idempotent():
    lay = Layout("/root", DEP)
    (start,) = init_for("supervisor").start(lay, sudo=False)
    assert "setsid -f" in start.cmd and "</dev/null" in start.cmd and "already running" in start.cmd
    # under the run directory's flock, and it waits for the new supervisor's pid file
    assert "flock" in start.cmd and start.cmd.index("setsid -f") < start.cmd.rindex("mur_alive")
    assert "supervise run --spec" in start.cmd and not start.sudo
    (stop,) = init_for("supervisor").stop(lay, sudo=True)
    assert stop.sudo and not stop.check and "kill -TERM" in stop.cmd and "kill -KILL" in stop.cmd
    # the recorded pid is signalled only after its identity was checked
    assert stop.cmd.index("mur_alive") < stop.cmd.index("kill -TERM")


def test_a_boot_hook_is_installed_with_the_release_and_removed_by_destroy():
    lay = Layout("/home/deployer", DEP)
    plan = plan_release(inputs(init="supervisor", boot="cron"))
    boot = next(s for s in plan.prepare if isinstance(s, WriteFile) and s.dst == lay.boot_script)
    assert boot.mode == 0o755 and b"sudo -n sh -c" in boot.content and b"supervise run" in boot.content
    cron = [s for s in plan.activate if isinstance(s, Run) and s.label == "install boot hook"]
    assert len(cron) == 1 and f"@reboot /bin/sh {lay.boot_script} # mur:{DEP}" in cron[0].cmd
    assert not any(isinstance(s, Run) and s.label == "install boot hook"
                   for s in plan_release(inputs(init="supervisor", boot="none")).activate)
    text = "\n".join(s.cmd for s in destroy_steps(lay, "supervisor", True))
    assert f"# mur:{DEP}" in text and "crontab -" in text


def test_the_token_file_is_private_and_a_new_token_is_a_new_release():
    plan = plan_release(inputs(token=b"tok-1"))
    tok = next(s for s in plan.prepare if isinstance(s, WriteFile) and s.dst.endswith("/a2a-token"))
    assert tok.mode == 0o600 and tok.content == b"tok-1" and tok.dst == f"{plan.stage_dir}/a2a-token"
    assert plan_release(inputs(token=b"tok-2")).digest != plan.digest
    assert "tok-1" not in json.dumps(plan.release_meta) and "tok-1" not in json.dumps(plan.service_spec)
    assert plan.service_spec["env"]["MURMUR_A2A_TOKEN_FILE"] == f"{plan.release_dir}/a2a-token"


def test_the_service_stages_payloads_inside_the_deployment_and_bounds_sessions():
    plan = plan_release(inputs(init="supervisor", keep_sessions=3))
    lay = plan.layout
    assert plan.service_spec["env"]["TMPDIR"] == lay.tmp_dir == f"{lay.root}/tmp"
    pre = next(s for s in plan.prepare if isinstance(s, WriteFile) and s.dst.endswith("/prestart.sh"))
    text = pre.content.decode()
    assert f"rm -rf {lay.tmp_dir}/mur-payloads-*" in text and "tail -n +4" in text and "ses_*" in text


def test_destroy_stops_removes_and_releases_shared_files():
    lay = Layout("/home/u", DEP)
    text = "\n".join(s.cmd for s in destroy_steps(lay, "systemd", True))
    assert text.index("systemctl stop") < text.index("rm -f /etc/systemd/system/") < text.index(f"rm -rf {lay.root}")
    assert f"rm -rf {lay.root} {lay.staging}" in text
    assert f"/home/u/.murmur/bin/.refs/*/{DEP}" in text and f"/home/u/.murmur/artifacts/*/*/.refs/{DEP}" in text
    assert "flock -n 8" not in text  # the collection runs after the lock files went (collect_step)
    gc = gc_shared_command(lay)
    # unreferenced runtimes go (not this machine's: its runtimes are its own cache)
    assert "@@gc runtime" in gc and "@@gc runtime" not in gc_shared_command(lay, keep_bundles=True)
    # only with the shared lock taken exclusively and without waiting: a deploy in progress holds it shared
    assert "flock -n 8" in gc and gc.rstrip().endswith(f"8>>{lay.locks}/shared.lock; true")
    # an artifact or compiled component goes only when its references are all gone (never the user's store)
    assert '[ -d "$v/.refs" ]' in gc and "@@gc payload cache" in gc and 'flock -n "$p/.owner.lock" true' in gc
    # the host's last deployment takes what the runtime cached for all of them: compiled components,
    # the probe's answer, remembered digests, the session disk's templates (mur.sandbox.disk)
    last = gc.split("rm -rf -- ", 2)[-1]
    assert all(c in gc for c in (lay.wasm_cache, lay.probe_cache, lay.digest_cache, lay.disk_templates))
    assert lay.disk_templates == "/home/u/.murmur/cache/disk" and "/cache/disk" in last


def test_sweep_removes_only_what_interrupted_commands_left():
    lay = Layout("/h", DEP)
    cmd = sweep_command(lay)
    assert f"rm -rf -- {lay.staging}" in cmd and 'if [ ! -f "$r/release.json" ]' in cmd and ".smoke" in cmd
    assert "smoke.pid" in cmd  # a smoke start a dropped connection left running is stopped first


def test_prune_keeps_the_listed_releases_and_counts_only_complete_ones():
    cmd = prune_command(Layout("/h", DEP), [5, 4, 3])
    assert '" 3 4 5 "' in cmd and "rm -rf" in cmd and '[ -f "$r/release.json" ] || continue' in cmd


def test_env_args_and_files():
    assert parse_env_args(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(MurError) as err:
        parse_env_args(["NOEQUALS"])
    assert err.value.code == "E-DEPLOY-001" and 'must be KEY=VALUE' in err.value.message
    text = "# c\n\nexport A=1\nB='two words'\nC=\"q\"\n"
    assert parse(text, ".env") == {"A": "1", "B": "two words", "C": "q"}
    with pytest.raises(MurError):
        parse("1BAD=x\n", ".env")
    env = {"A": 'x "y" $HOME `cmd` \\ end', "B": ""}
    assert read_env_file(render_env_file(env).decode()) == env


def test_ports_are_stable_and_avoid_listeners():
    table = ("  sl  local_address rem_address   st\n"
             "   0: 0100007F:5BA0 00000000:0000 0A 00000000:00000000\n"
             "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000\n")
    assert listening_ports(table) == {0x5BA0}
    first = pick_port(DEP, set())
    assert pick_port(DEP, set()) == first and 20000 <= first < 32768
    assert pick_port(DEP, {first}) != first
    assert pick_port(DEP, set(), salt=1) != first


def test_a_declared_port_wins_over_the_recorded_one():
    assert choose_port(DEP, 30001, 25000, set(), "t") == 30001  # a changed network.internal_port is honoured
    assert choose_port(DEP, None, 25000, {25000}, "t") == 25000  # the recorded one (ours: it listens)
    assert choose_port(DEP, 30001, 30001, {30001}, "t") == 30001
    with pytest.raises(MurError) as err:
        choose_port(DEP, 30001, 25000, {30001}, "host")
    assert err.value.code == "E-DEPLOY-007" and "already in use on host" in err.value.message


def test_derived_ports_stay_in_the_range_the_environment_names(monkeypatch):
    from mur.deploy.plan import PORTS_ENV, port_range

    monkeypatch.delenv(PORTS_ENV, raising=False)
    assert port_range() == (20000, 32768) and 20000 <= pick_port(DEP, set()) < 32768
    monkeypatch.setenv(PORTS_ENV, "41000-41003")
    ports = {pick_port(f"dep_{i:032x}", set()) for i in range(40)}
    assert ports == {41000, 41001, 41002, 41003}
    assert pick_port(DEP, {41000, 41001, 41002}) == 41003
    with pytest.raises(MurError) as err:
        pick_port(DEP, {41000, 41001, 41002, 41003})
    assert err.value.code == "E-DEPLOY-007" and "41000-41003" in err.value.message
    for bad in ("41000", "5-6", "40000-30000", "x-y", "30000-70000"):
        monkeypatch.setenv(PORTS_ENV, bad)
        with pytest.raises(MurError) as err:
            port_range()
        assert err.value.code == "E-DEPLOY-001" and PORTS_ENV in err.value.message and err.value.hint
