"""Run an exported pod under Docker as a kubelet would: no cluster runs on this project's machines, so
the pod spec is read from the exported manifests and each of its settings becomes the Docker setting
that does the same, nothing adjusted unless the caller says so.

  * containers: the image (by digest), `command` as the entrypoint, `env` + `envFrom` the Secret,
    `runAsUser`/`runAsGroup`, `readOnlyRootFilesystem`, `capabilities.drop`, no-new-privileges
    (`allowPrivilegeEscalation: false`), the Localhost seccomp profile from the export's seccomp/
    (RuntimeDefault: Docker's default profile), memory and CPU limits;
  * the pod's network: a network namespace of its own (`network_mode=none`: only loopback, as a pod
    seen from inside; the caller reaches it with `in_pod_netns`, which enters that namespace);
  * volumes with the kubelet's ownership rules for `fsGroup`: an `emptyDir` is a 0777 directory made
    group fsGroup + setgid, bind-mounted from here (not Docker's tmpfs, which copies the image's own
    directory and its mode up into the mount, where a kubelet's emptyDir hides it; `sizeLimit`, which
    the kubelet enforces by eviction, is not emulated); a `secret` volume has the kubelet's atomic-writer layout
    (`..data` -> a timestamped directory, each key a link into it), files owned by root, group
    fsGroup, mode `defaultMode | 0440` (the kubelet adds group read for fsGroup), mounted read-only;
  * init containers run first, in order, each to a zero exit, then the container starts;
  * exec probes run through `docker exec` with the container's env, as the kubelet runs them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
READ_ONLY_MASK = 0o440  # the kubelet's roMask for a read-only volume under fsGroup (pkg/volume/volume_linux.go)


def quantity_bytes(q: str) -> int:
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", q)
    assert m, q
    return int(m.group(1)) * UNITS.get(m.group(2) or "", 1)


def nano_cpus(q: str) -> int:
    return int(q[:-1]) * 1_000_000 if q.endswith("m") else int(q) * 1_000_000_000


def load_export(export_dir: Path) -> dict[str, Any]:
    return {p.name: yaml.safe_load(p.read_text()) for p in export_dir.glob("*.yaml")}


class Pod:
    """The exported Deployment's pod, run under Docker; `close()` removes what it made."""

    def __init__(self, client, export_dir: Path, scratch: Path, name: str, *, network: str = "none",
                 env_override: dict[str, str] | None = None):
        self.client, self.dir, self.name = client, export_dir, name
        self.docs = load_export(export_dir)
        workload = self.docs.get("deployment.yaml") or self.docs.get("statefulset.yaml")
        self.spec = workload["spec"]["template"]["spec"]
        self.scratch = scratch
        self.network, self.env_override = network, env_override or {}
        self.secrets = {d["metadata"]["name"]: d for d in self.docs.values() if d.get("kind") == "Secret"}
        self.fs_group = self.spec["securityContext"].get("fsGroup")
        self.host_dirs: dict[str, Path] = {}
        self.container = None
        self.init_logs: list[str] = []

    # --- volumes ------------------------------------------------------------------------------

    def _group(self, path: Path, mode: int) -> None:
        if self.fs_group is not None:
            os.lchown(path, -1, self.fs_group)
        if not path.is_symlink():
            os.chmod(path, mode)

    def _secret_dir(self, name: str, vol: dict[str, Any]) -> Path:
        secret = self.secrets[vol["secretName"]]
        data = dict(secret.get("stringData") or {})
        root = self.scratch / f"vol-{name}"
        stamp = root / "..2030_01_01_00_00_00.000000001"
        stamp.mkdir(parents=True)
        (root / "..data").symlink_to(stamp.name)
        items = vol.get("items") or [{"key": k, "path": k} for k in data]
        default = vol.get("defaultMode", 0o644)
        for item in items:
            f = stamp / item["path"]
            f.write_text(data[item["key"]])
            mode = item.get("mode", default)
            if self.fs_group is not None:
                mode |= READ_ONLY_MASK
            os.chown(f, 0, 0)
            self._group(f, mode)
            (root / item["path"]).symlink_to(f"..data/{item['path']}")
            self._group(root / item["path"], 0)
        for d in (root, stamp):
            self._group(d, 0o755 | (0o2000 | READ_ONLY_MASK | 0o110 if self.fs_group is not None else 0))
        return root

    def _empty_dir(self, name: str) -> Path:
        root = self.scratch / f"vol-{name}"
        root.mkdir(parents=True)
        self._group(root, 0o777 | (0o2000 if self.fs_group is not None else 0))
        return root

    def _mounts(self, c: dict[str, Any]) -> dict[str, Any]:
        """The bind mounts of one container (every volume is a directory made here, as the kubelet's are)."""
        volumes = {v["name"]: v for v in self.spec["volumes"]}
        binds: dict[str, Any] = {}
        for m in c.get("volumeMounts", []):
            vol = volumes[m["name"]]
            mode = "ro" if m.get("readOnly") else "rw"
            if "secret" in vol:
                if m["name"] not in self.host_dirs:
                    self.host_dirs[m["name"]] = self._secret_dir(m["name"], vol["secret"])
                binds[str(self.host_dirs[m["name"]])] = {"bind": m["mountPath"], "mode": "ro"}
            elif "emptyDir" in vol:
                if m["name"] not in self.host_dirs:
                    self.host_dirs[m["name"]] = self._empty_dir(m["name"])
                binds[str(self.host_dirs[m["name"]])] = {"bind": m["mountPath"], "mode": mode}
            else:
                raise AssertionError(f"a volume kind this emulation does not know: {vol}")
        return binds

    # --- containers ---------------------------------------------------------------------------

    def _options(self, c: dict[str, Any]) -> dict[str, Any]:
        sc, psc = c["securityContext"], self.spec["securityContext"]
        profile = psc["seccompProfile"]
        opts = []
        if profile["type"] == "Localhost":
            text = (self.dir / "seccomp" / profile["localhostProfile"]).read_text()
            opts.append("seccomp=" + json.dumps(json.loads(text)))
        else:
            assert profile["type"] == "RuntimeDefault", profile
        if sc.get("allowPrivilegeEscalation") is False:
            opts.append("no-new-privileges")
        assert sc["privileged"] is False and sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
        env = {e["name"]: e["value"] for e in c.get("env", [])}
        for source in c.get("envFrom", []):
            env.update(self.secrets[source["secretRef"]["name"]].get("stringData") or {})
        env.update(self.env_override)
        binds = self._mounts(c)
        limits = c["resources"]["limits"]
        group_add = [str(self.fs_group)] if self.fs_group is not None else []
        return {
            "user": f"{sc['runAsUser']}:{sc['runAsGroup']}", "group_add": group_add,
            "read_only": sc["readOnlyRootFilesystem"], "cap_drop": sc["capabilities"]["drop"],
            "security_opt": opts, "volumes": binds, "environment": env,
            "mem_limit": quantity_bytes(limits["memory"]), "nano_cpus": nano_cpus(limits["cpu"]),
            "entrypoint": c.get("command"), "command": c.get("args"),
        }

    def start(self) -> Any:
        for init in self.spec.get("initContainers", []):
            c = self.client.containers.run(init["image"], name=f"{self.name}-init-{uuid.uuid4().hex[:6]}",
                                           network_mode="none", detach=True, **self._options(init))
            try:
                status = c.wait(timeout=120)["StatusCode"]
                self.init_logs.append(c.logs().decode())
            finally:
                c.remove(force=True, v=True)
            assert status == 0, f"init container {init['name']} exited {status}: {self.init_logs[-1]}"
        (main,) = self.spec["containers"]
        self.main = main
        self.container = self.client.containers.run(main["image"], name=self.name, network_mode=self.network,
                                                    detach=True, **self._options(main))
        return self.container

    def probe(self, kind: str) -> int:
        """Run the container's `kind` probe (startupProbe, readinessProbe, livenessProbe) once."""
        probe = self.main[kind]
        assert set(probe) >= {"exec"}, f"{kind} is not an exec probe: {probe}"
        code, _ = self.container.exec_run(probe["exec"]["command"])
        return code

    def in_pod_netns(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
        """Run `argv` here, in the pod's network namespace (as `kubectl port-forward` reaches it)."""
        self.container.reload()
        pid = self.container.attrs["State"]["Pid"]
        return subprocess.run(["nsenter", "-t", str(pid), "-n", *argv], capture_output=True, text=True, **kw)

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True, v=True)
            except Exception:  # noqa: BLE001 - best effort
                pass
        for path in self.host_dirs.values():
            shutil.rmtree(path, ignore_errors=True)
