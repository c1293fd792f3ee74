"""What deploy removes, as pure commands: leftovers of interrupted commands, old releases, shared
files nobody uses, and a whole deployment.

    sweep_command      under the deployment's lock: its staging area, release directories without
                       release.json (older mur versions built releases in place), smoke leftovers
    prune_command      old complete releases beyond the ones kept (incomplete ones never count)
    gc_shared_command  (collect_step) with the host's shared lock taken exclusively, without waiting: runtimes,
                       unpacked runtimes, artifacts and compiled components no deployment references,
                       partial copies, payload caches of sessions that are gone, then empty directories
    destroy_steps      stop, remove unit and boot hook, the deployment's files and references

Each prints `@@swept <what>` / `@@gc <what>` lines, so callers can say what was removed.
"""

from __future__ import annotations

import shlex

from mur.deploy.fronted import remove_command as fronted_remove_command
from mur.deploy.init import init_for
from mur.deploy.init.supervisor import stop_smoke_command
from mur.deploy.lock import SHARED
from mur.deploy.steps import DEPLOYMENT_TMP_GLOBS, Layout, Run, Step

# a payload directory without its owner's lock file counts as abandoned after this (the runtime
# creates the lock right after the directory: mur.session.staging.UNLOCKED_GRACE)
PAYLOAD_GRACE_MINUTES = 10


def sweep_command(lay: Layout) -> str:
    """Remove what interrupted commands of this deployment left (run holding its lock)."""
    q = shlex.quote
    return (
        f"{stop_smoke_command(lay)}; "
        f"if cd {q(lay.root)} 2>/dev/null; then "
        "for r in releases/*; do [ -d \"$r\" ] || continue; "
        "if [ ! -f \"$r/release.json\" ]; then echo \"@@swept $r (no release.json)\"; rm -rf -- \"$r\"; "
        "elif [ -e \"$r/.smoke\" ]; then echo \"@@swept $r/.smoke\"; rm -rf -- \"$r/.smoke\"; fi; done; "
        f"for f in {' '.join(DEPLOYMENT_TMP_GLOBS)}; do "
        "if [ -e \"$f\" ] || [ -L \"$f\" ]; then echo \"@@swept $f\"; rm -f -- \"$f\"; fi; done; fi; "
        f"if [ -d {q(lay.staging)} ]; then for s in {q(lay.staging)}/*; do [ -e \"$s\" ] || continue; "
        "echo \"@@swept staging/${s##*/}\"; done; "
        f"rm -rf -- {q(lay.staging)}; fi; true"
    )


def prune_command(lay: Layout, keep: list[int]) -> str:
    """Remove complete releases other than `keep` (the current and previous few)."""
    keep_set = " ".join(str(k) for k in sorted(set(keep)))
    return (f"cd {shlex.quote(lay.releases)} 2>/dev/null && for r in *; do [ -f \"$r/release.json\" ] || continue; "
            f"case \" {keep_set} \" in *\" $r \"*) ;; *) echo \"@@swept release $r\"; rm -rf -- \"$r\";; esac; done; true")


def gc_shared_command(lay: Layout, keep_bundles: bool = False) -> str:
    """Collect shared files no deployment uses, holding the host's shared lock exclusively (a deploy
    in progress holds it shared: then this does nothing and says so). `keep_bundles`: this
    machine's runtimes are its own cache. Stale references (their deployment is gone) are dropped
    first; then whatever nobody references goes; then empty directories, up to ~/.murmur itself."""
    q = shlex.quote
    m, b, a, w = q(lay.murmur), q(lay.bin_dir), q(lay.artifacts), q(lay.wasm_cache)
    deps = q(f"{lay.murmur}/deployments")
    payloads = q(f"{lay.murmur}/cache/payloads")
    locks = q(lay.locks)
    alive = f"[ -d {deps}/\"$dep\" ] || [ -d {q(lay.murmur + '/staging')}/\"$dep\" ]"
    drop_stale = (f"for r in {b}/.refs/*/* {a}/*/*/.refs/* {w}/.refs/*/*; do [ -e \"$r\" ] || continue; "
                  f"dep=${{r##*/}}; if ! {{ {alive}; }}; then rm -f -- \"$r\"; fi; done")
    bundles = "" if keep_bundles else (
        f"for f in {b}/mur-*; do [ -f \"$f\" ] || continue; n=${{f##*/}}; case \"$n\" in *.sha256|*.mur-tmp-*) continue;; esac; "
        f"if ! ls -A {b}/.refs/\"$n\" 2>/dev/null | grep -q .; then echo \"@@gc runtime $n\"; rm -f -- \"$f\" \"$f.sha256\"; "
        f"rmdir {b}/.refs/\"$n\" 2>/dev/null; fi; done; "
        f"for u in {q(lay.runtime_dir)}/*; do [ -d \"$u\" ] || continue; n=${{u##*/}}; "
        f"[ -e {b}/\"${{n%-*}}\" ] || {{ echo \"@@gc unpacked runtime $n\"; rm -rf -- \"$u\"; }}; done; "
        f"ls {b}/mur-* >/dev/null 2>&1 || rm -rf -- {b}/.probe; ")
    artifacts = (f"for v in {a}/*/*; do [ -d \"$v\" ] || continue; "
                 "if [ -d \"$v/.refs\" ] && ! ls -A \"$v/.refs\" 2>/dev/null | grep -q .; then echo \"@@gc artifact ${v#" + lay.artifacts
                 + "/}\"; rm -rf -- \"$v\"; fi; done; ")
    compiled = (f"for r in {w}/.refs/*; do [ -d \"$r\" ] || continue; n=${{r##*/}}; "
                f"if ! ls -A \"$r\" 2>/dev/null | grep -q .; then echo \"@@gc compiled $n\"; rm -f -- {w}/\"$n\"; "
                "rmdir \"$r\" 2>/dev/null; fi; done; ")
    sessions = (f"for p in {payloads}/*; do [ -d \"$p\" ] || continue; "
                "if [ -e \"$p/.owner.lock\" ]; then flock -n \"$p/.owner.lock\" true || continue; "
                f"elif [ -z \"$(find \"$p\" -maxdepth 0 -mmin +{PAYLOAD_GRACE_MINUTES} 2>/dev/null)\" ]; then continue; fi; "
                "echo \"@@gc payload cache ${p##*/}\"; rm -rf -- \"$p\"; done; ")
    partial = (f"for f in {b}/*.mur-tmp-* {a}/*/*/*.mur-tmp-* {w}/*.mur-tmp-*; do [ -e \"$f\" ] || continue; "
               "echo \"@@gc partial ${f##*/}\"; rm -f -- \"$f\"; done; ")
    last = "" if keep_bundles else (
        # the host's last deployment: what the runtime cached for all of them goes too
        f"if [ -z \"$(ls -A {deps} 2>/dev/null)\" ] && [ -z \"$(ls -A {q(lay.murmur + '/staging')} 2>/dev/null)\" ]; then "
        f"rm -rf -- {w} {q(lay.probe_cache)} {q(lay.digest_cache)} {q(lay.disk_templates)}; fi; ")
    empty = " ".join(q(d) for d in (
        f"{lay.bin_dir}/.refs", lay.runtime_dir, lay.bin_dir, f"{lay.wasm_cache}/.refs", lay.wasm_cache,
        f"{lay.murmur}/cache/payloads", f"{lay.murmur}/cache", f"{lay.murmur}/staging", f"{lay.murmur}/deployments"))
    tidy = (f"for d in {b}/.refs/* {a}/* ; do rmdir \"$d\" 2>/dev/null; done; rmdir {a} 2>/dev/null; "
            f"for d in {empty}; do rmdir \"$d\" 2>/dev/null; done; ")
    return (
        f"[ -d {m} ] || exit 0; mkdir -p {locks} && chmod 700 {locks}; "
        f"( flock -n 8 || {{ echo '@@busy a deploy in progress uses the shared files'; exit 0; }}; "
        f"{drop_stale}; {partial}{bundles}{artifacts}{compiled}{sessions}{last}{tidy}"
        # no deployment left: the shared lock goes too (a deploy that opened it finds it gone and takes
        # a fresh one: mur.deploy.lock checks the inode), and ~/.murmur when nothing else is in it
        f"if [ -z \"$(ls -A {deps} {q(lay.murmur + '/staging')} 2>/dev/null)\" ] "
        f"&& [ -z \"$(ls -A {locks} 2>/dev/null | grep -vx {q(SHARED + '.lock')})\" ]; then "
        f"rm -f {locks}/{SHARED}.lock; rmdir {locks} 2>/dev/null; rmdir {m} 2>/dev/null; fi; true "
        f") 8>>{locks}/{SHARED}.lock; true"
    )


def destroy_steps(lay: Layout, init: str, sudo: bool, keep_bundles: bool = False) -> list[Step]:
    """Stop, remove unit, boot hook and the deployment's files and references. Run holding the
    deployment's lock; then the lock files go (TargetLock.remove_files), then `gc_shared_command`
    collects the shared files nobody uses any more (a host's last deployment leaves nothing)."""
    q = shlex.quote
    system = init_for(init)
    steps = [*system.stop(lay, sudo), *system.remove(lay, sudo)]
    if init != "supervisor":  # a boot hook may exist from an earlier supervisor release
        steps += init_for("supervisor").remove(lay, sudo)
    steps.append(Run(stop_smoke_command(lay), check=False, label="stop a smoke start"))
    steps.append(Run(fronted_remove_command(lay), sudo=sudo, check=False, label="stop the front and the twin"))
    # Run and log files may belong to root (a supervisor started through sudo).
    steps.append(Run(f"rm -rf {q(lay.root)} {q(lay.staging)}", sudo=sudo, label="remove deployment files"))
    refs = f"{q(lay.bin_dir)}/.refs/*/{lay.dep_id} {q(lay.artifacts)}/*/*/.refs/{lay.dep_id} {q(lay.wasm_cache)}/.refs/*/{lay.dep_id}"
    steps.append(Run(f"rm -f -- {refs}; true", check=False, label="drop references"))
    return steps


def collect_step(lay: Layout, keep_bundles: bool = False) -> Run:
    return Run(gc_shared_command(lay, keep_bundles), check=False, label="collect unused shared files")
