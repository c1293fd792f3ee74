"""The pinned runtime: one file `mur-<version>-<platform>` that runs on a target with no Python.

Why a PyInstaller build (docs/deploy.md has the numbers): targets may have no Python at all (a
debootstrap minbase container) or a different one, and the runtime needs native pieces (wasmtime's
shared library, libpython). A zipapp would need a matching CPython on every target. The single
file is a self-extracting one-dir build (see `_HEADER`), not PyInstaller's one-file mode. The
binary is built from the *installed* package when the pin equals the local version, else fetched
from a release source (a folder or an HTTPS base holding the file and a `checksums.txt` in
sha256sum format) and verified. Either way it is cached as `~/.murmur/bin/mur-<v>-<platform>`
(0755, atomic) with a `.sha256` sidecar, and verified again every time it is used.

Local builds are keyed by a digest of the installed sources and dependency versions, kept in a
shared build cache (so a clean HOME does not rebuild) and never rebuilt while nothing changed:
an unchanged redeploy therefore uploads a byte-identical file, i.e. nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from mur import __version__
from mur.fsutil import write_file as atomic_write
from mur.errors import MurError
from mur.fsutil import file_sha256, locked
from mur.paths import bin_dir, global_config_path
from mur.platform import current_platform

# Packages the target never needs: they only serve `mur deploy` itself or tests. Leaving them out
# keeps the bundle small (paramiko+cryptography alone are ~10 MB) and its start fast.
EXCLUDED_MODULES = (
    "paramiko", "docker", "testcontainers", "PyInstaller", "pytest", "_pytest", "hypothesis",
    "componentize_py", "tkinter", "a2a", "IPython", "matplotlib", "numpy",
)
# Packages whose installed metadata is read at run time (entry points, versions).
COPY_METADATA = ("opentelemetry-api", "opentelemetry-sdk", "mur")
COLLECT_ALL = ("wasmtime",)

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Bundle:
    """A verified runtime file on this machine."""

    path: Path
    version: str
    platform: str
    sha256: str
    size: int
    origin: str  # "built" | "cache" | "release" | "installed" | "explicit"

    @property
    def name(self) -> str:
        """The file name on targets (the same as here: mur-<version>-<platform>[-py])."""
        return self.path.name


def bundle_filename(version: str, platform: str) -> str:
    return f"mur-{version}-{platform}"


# --- local builds ---------------------------------------------------------------------------


def _package_root() -> Path:
    import mur

    return Path(mur.__file__).resolve().parent


def source_digest() -> str:
    """Digest of what a local build is made of: mur's files, dependency versions, Python."""
    from importlib import metadata

    h = hashlib.sha256()
    root = _package_root()
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file() or path.suffix in (".pyc", ".pyo"):
            continue
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    try:
        requires = metadata.requires("mur") or []
    except metadata.PackageNotFoundError:
        requires = []
    names = sorted({_req_name(r) for r in requires if "extra ==" not in r} | {"pyinstaller"})
    for name in names:
        try:
            h.update(f"{name}=={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}==?\n".encode())
    h.update(f"{sys.version}|{current_platform()}|{__version__}".encode())
    return h.hexdigest()


def _req_name(req: str) -> str:
    for sep in "<>=!~;[ (":
        req = req.split(sep, 1)[0]
    return req.strip().lower()


def build_cache_dir() -> Path:
    """Shared build cache: $MUR_BUNDLE_CACHE, else the venv's share/ (if writable), else ~/.cache."""
    env = os.environ.get("MUR_BUNDLE_CACHE")
    if env:
        return Path(env)
    venv_share = Path(sys.prefix) / "share" / "mur" / "bundles"
    probe = venv_share if venv_share.exists() else Path(sys.prefix)
    if sys.prefix != sys.base_prefix and os.access(probe, os.W_OK):
        return venv_share
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mur" / "bundles"




def pyinstaller_command(entry: Path, name: str, dist: Path, work: Path) -> list[str]:
    """The PyInstaller invocation (pure, so tests can check what goes into the bundle)."""
    src_parent = _package_root().parent
    cmd = [
        sys.executable, "-m", "PyInstaller", "--onedir", "--noconfirm",
        "--log-level", "WARN", "--name", name,
        "--distpath", str(dist), "--workpath", str(work / "build"), "--specpath", str(work),
        # The package may be installed editable: point the analysis at its source tree.
        "--paths", str(src_parent),
        # Commands are imported by name at run time (mur.cli.main.COMMAND_MODULES).
        "--collect-submodules", "mur",
        # WIT files and other package data.
        "--collect-data", "mur",
    ]
    for pkg in COLLECT_ALL:
        cmd += ["--collect-all", pkg]
    for mod in runtime_modules():
        cmd += ["--hidden-import", mod]
    for src, dest in native_libraries():
        cmd += ["--add-binary", f"{src}{os.pathsep}{dest}"]
    for dist_name in COPY_METADATA:
        cmd += ["--copy-metadata", dist_name]
    for mod in EXCLUDED_MODULES:
        cmd += ["--exclude-module", mod]
    cmd.append(str(entry))
    return cmd


def native_libraries() -> list[tuple[str, str]]:
    """(file, bundle dir) of shared libraries PyInstaller's collectors miss.

    wasmtime-py loads `wasmtime/<platform>/_libwasmtime.so` with ctypes; the leading underscore
    keeps it out of `--collect-all`'s `lib*.so` pattern, and a bundle without it cannot run any
    component.
    """
    import importlib.util

    out = []
    spec = importlib.util.find_spec("wasmtime")
    if spec and spec.origin:
        pkg = Path(spec.origin).parent
        for lib in sorted(pkg.glob("*-*/_libwasmtime.*")):
            out.append((str(lib), f"wasmtime/{lib.parent.name}"))
    return out


def runtime_modules() -> list[str]:
    """Top-level modules of mur's runtime dependencies: some are imported by name at run time
    (e.g. the seccomp binding), which PyInstaller's static analysis cannot see."""
    from importlib import metadata

    try:
        requires = metadata.requires("mur") or []
    except metadata.PackageNotFoundError:
        return []
    wanted = {_req_name(r).replace("_", "-") for r in requires if "extra ==" not in r}
    mods = []
    for mod, dists in metadata.packages_distributions().items():
        if mod.startswith("_") or mod in EXCLUDED_MODULES:
            continue
        if any(d.lower().replace("_", "-") in wanted for d in dists) and mod.isidentifier():
            mods.append(mod)
    return sorted(set(mods))


_ENTRY = """\
import sys
if sys.argv[1:2] == ["--mur-sandbox-spawner"]:  # mur.sandbox.spawn.SPAWNER_FLAG: a session's spawner
    from mur.sandbox.zygote import main as spawner
    spawner()
else:
    from mur.cli.main import main
    main()
"""


# The single file is a POSIX sh header + a tar.gz of the PyInstaller one-dir build. First run
# unpacks it once (atomically: temp dir + rename) into ~/.murmur/runtime/<id>/, every run then
# `exec`s the unpacked binary: one process, no bootloader parent (a PyInstaller one-file binary
# keeps one, which the runtime's cgroup v2 self-move and systemd's SIGTERM both trip over), and no
# decompression at each start (~15 s per start on an emulated VM with a one-file binary).
_HEADER = """#!/bin/sh
# mur {version} ({platform}): the pinned mur runtime, a self-extracting PyInstaller build.
# Unpacked once into ~/.murmur/runtime/{ident}/ (or $MUR_RUNTIME_DIR), then executed in place.
set -eu
id={ident}
base="${{MUR_RUNTIME_DIR:-${{HOME:-/tmp}}/.murmur/runtime}}"
dir="$base/$id"
if [ ! -x "$dir/mur" ]; then
  mkdir -p "$base"
  tmp="$base/.$id.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tail -c +{offset:010d} "$0" | tar -xzf - -C "$tmp"
  mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
fi
exec "$dir/mur" "$@"
exit 127
"""


def runtime_id(name: str, payload_sha: str) -> str:
    return f"{name}-{payload_sha[:16]}"


def _tar_dir(src: Path, out: Path) -> None:
    """A reproducible tar.gz of `src` (sorted, zeroed owners and times)."""
    import gzip
    import tarfile

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*")):
            tar.add(str(path), arcname=str(path.relative_to(src)), recursive=False, filter=clean)


def assemble(onedir: Path, out: Path, version: str, plat: str) -> Path:
    """Wrap a PyInstaller one-dir build (holding `mur`) into the single self-extracting file."""
    payload = out.with_name(out.name + ".tar.gz.tmp")
    _tar_dir(onedir, payload)
    sha = file_sha256(payload)
    name = bundle_filename(version, plat)
    probe = _HEADER.format(version=version, platform=plat, ident=runtime_id(name, sha), offset=0)
    header = _HEADER.format(version=version, platform=plat, ident=runtime_id(name, sha),
                            offset=len(probe.encode()) + 1).encode()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh, open(payload, "rb") as src:
        fh.write(header)
        shutil.copyfileobj(src, fh, 1 << 20)
    payload.unlink()
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


def build_env(shim: Path) -> dict[str, str]:
    """PyInstaller's environment: PATH starts with mur's objdump/objcopy (mur.runtime.elfshim), so
    the build never needs binutils (a fresh Debian 12 has none) and never runs them where they exist."""
    from mur.runtime.elfshim import shim_dir

    env = dict(os.environ)
    env["PATH"] = f"{shim_dir(shim)}{os.pathsep}{env.get('PATH') or os.defpath}"
    return env


def missing_libpython() -> str | None:
    """The shared libpython this interpreter was built with, when it is not installed (else None).

    PyInstaller puts it into the bundle (the bootloader loads it). Debian's python3 is linked
    statically and ships the library apart, in libpython3.X, which a fresh Debian 12 lacks.
    """
    import ctypes.util
    import sysconfig

    name = str(sysconfig.get_config_var("INSTSONAME") or "")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or ".so" not in name:
        return None  # a static build: PyInstaller's own message is the better one
    libdir = str(sysconfig.get_config_var("LIBDIR") or "")
    multiarch = str(sysconfig.get_config_var("MULTIARCH") or "")
    dirs = [libdir, os.path.join(libdir, multiarch), os.path.join(sys.base_prefix, "lib"),
            f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib", "/lib"]
    if any(d and os.path.exists(os.path.join(d, name)) for d in dirs):
        return None
    stem = name[3:].split(".so", 1)[0]  # libpython3.11.so.1.0 -> python3.11
    return None if ctypes.util.find_library(stem) else name


def build_bundle(dest_dir: Path, progress: Progress = _quiet) -> Path:
    """Run PyInstaller on the installed package; returns the single-file runtime."""
    try:
        import PyInstaller  # noqa: F401
    except ImportError as exc:
        raise MurError("E-DEPLOY-006", "cannot build the mur runtime bundle: PyInstaller is not installed",
                       "pip install pyinstaller, or pass --release-source with a prebuilt mur-<version>-<platform>") from exc
    lib = missing_libpython()
    if lib is not None:
        pkg = lib.split(".so", 1)[0]  # libpython3.11
        raise MurError("E-DEPLOY-006", f"cannot build the mur runtime bundle: this Python's shared library {lib} "
                       "is not installed, and the bundle carries it",
                       f"apt-get install {pkg} (Debian ships it apart from python3), or pass --release-source "
                       "with a prebuilt mur-<version>-<platform>")
    plat = current_platform()
    name = bundle_filename(__version__, plat)
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mur-bundle-") as tmp:
        work = Path(tmp)
        entry = work / "mur_entry.py"
        entry.write_text(_ENTRY)
        progress(f"building the mur {__version__} runtime bundle with PyInstaller (once per source change, ~1 min)")
        proc = subprocess.run(pyinstaller_command(entry, "mur", work / "dist", work),
                              capture_output=True, text=True, cwd=work, env=build_env(work / "shim"))
        built = work / "dist" / "mur"
        if proc.returncode != 0 or not (built / "mur").is_file():
            tail = (proc.stderr or proc.stdout or "")[-1500:]
            raise MurError("E-DEPLOY-006", f"PyInstaller failed to build {name} (exit {proc.returncode}):\n{tail}",
                           "rerun with MUR_DEBUG=1, or pass --release-source with a prebuilt runtime")
        return assemble(built, dest_dir / name, __version__, plat)


def ensure_local_bundle(progress: Progress = _quiet) -> Bundle:
    """The runtime for this machine's version: cached if the sources are unchanged, else built."""
    plat = current_platform()
    name = bundle_filename(__version__, plat)
    digest = source_digest()
    target = bin_dir() / name
    with locked(bin_dir() / f".{name}.lock"):
        if _sidecar(target, ".source") == digest and _verified(target):
            return _bundle(target, __version__, plat, "cache")
        cache = build_cache_dir() / digest[:20]
        cached = cache / name
        with locked(build_cache_dir() / ".build.lock"):
            if not (cached.is_file() and _sidecar(cached, ".sha256") == file_sha256(cached)):
                build_bundle(cache, progress)
                _write_sidecar(cached, ".sha256", file_sha256(cached))
                _prune_build_cache(build_cache_dir(), keep=cache)
        _install_into_cache(cached, target)
        _write_sidecar(target, ".source", digest)
        return _bundle(target, __version__, plat, "built")


def _prune_build_cache(root: Path, keep: Path, max_entries: int = 3) -> None:
    entries = sorted((p for p in root.iterdir() if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime)
    for old in entries[: max(0, len(entries) - (max_entries - 1))]:
        shutil.rmtree(old, ignore_errors=True)


def _install_into_cache(src: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    _write_sidecar(target, ".sha256", file_sha256(target))


def _sidecar(path: Path, suffix: str) -> str | None:
    try:
        return path.with_name(path.name + suffix).read_text().split()[0]
    except (OSError, IndexError):
        return None


def _write_sidecar(path: Path, suffix: str, value: str) -> None:
    atomic_write(path.with_name(path.name + suffix), f"{value}  {path.name}\n".encode(), 0o644)


def _verified(path: Path) -> bool:
    want = _sidecar(path, ".sha256")
    return bool(want) and path.is_file() and path.stat().st_size > 0 and file_sha256(path) == want


def _bundle(path: Path, version: str, plat: str, origin: str) -> Bundle:
    return Bundle(path=path, version=version, platform=plat, sha256=file_sha256(path),
                  size=path.stat().st_size, origin=origin)


# --- release sources ------------------------------------------------------------------------


def parse_checksums(text: str) -> dict[str, str]:
    """`sha256sum` output (`<hex>  <name>` or `<hex> *<name>`) -> {name: hex}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or len(parts[0]) != 64:
            continue
        try:
            int(parts[0], 16)
        except ValueError:
            continue
        out[parts[1].lstrip("*").strip().rsplit("/", 1)[-1]] = parts[0].lower()
    return out


def configured_release_source() -> str | None:
    """`deploy.release_source` from the global `~/.murmur/config.yaml`, if set."""
    path = global_config_path()
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - yaml or OSError: one message either way
        raise MurError("E-CFG-003", f"cannot read {path}: {exc}") from exc
    deploy = data.get("deploy") if isinstance(data, dict) else None
    value = deploy.get("release_source") if isinstance(deploy, dict) else None
    return str(value) if value else None


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Source:
    """A folder or an HTTP(S) base URL holding release files."""

    def __init__(self, spec: str):
        self.spec = spec.rstrip("/")
        parsed = urlparse(self.spec)
        self.is_url = parsed.scheme in ("http", "https")
        if parsed.scheme == "http" and not _is_loopback(parsed.hostname):
            raise MurError("E-DEPLOY-006", f"release source {spec} is plain http on a non-loopback host",
                           "use an https:// base (plain http is accepted on loopback only)")
        if parsed.scheme not in ("", "http", "https", "file"):
            raise MurError("E-DEPLOY-006", f"unsupported release source {spec}", "give a folder or an https:// base URL")
        if parsed.scheme == "file":
            self.spec = parsed.path

    def read_text(self, name: str) -> str:
        if not self.is_url:
            try:
                return (Path(self.spec) / name).read_text(encoding="utf-8")
            except OSError as exc:
                raise MurError("E-DEPLOY-006", f"cannot read {name} from release source {self.spec}: {exc.strerror or exc}",
                               _FETCH_HINT) from exc
        import httpx

        try:
            resp = httpx.get(f"{self.spec}/{name}", timeout=60, follow_redirects=True)
        except httpx.HTTPError as exc:
            raise MurError("E-DEPLOY-006", f"cannot fetch {self.spec}/{name}: {exc}", _FETCH_HINT) from exc
        if resp.status_code != 200:
            raise MurError("E-DEPLOY-006", f"cannot fetch {self.spec}/{name}: HTTP {resp.status_code}", _FETCH_HINT)
        return resp.text

    def copy_to(self, name: str, dest: Path) -> str:
        """Copy one file into `dest`; returns its sha256."""
        h = hashlib.sha256()
        with open(dest, "wb") as out:
            if not self.is_url:
                try:
                    with open(Path(self.spec) / name, "rb") as src:
                        for chunk in iter(lambda: src.read(1 << 20), b""):
                            h.update(chunk)
                            out.write(chunk)
                except OSError as exc:
                    raise MurError("E-DEPLOY-006", f"cannot read {name} from release source {self.spec}: {exc.strerror or exc}",
                                   _FETCH_HINT) from exc
            else:
                import httpx

                try:
                    with httpx.stream("GET", f"{self.spec}/{name}", timeout=60, follow_redirects=True) as resp:
                        if resp.status_code != 200:
                            raise MurError("E-DEPLOY-006", f"cannot fetch {self.spec}/{name}: HTTP {resp.status_code}",
                                           _FETCH_HINT)
                        for chunk in resp.iter_bytes(1 << 20):
                            h.update(chunk)
                            out.write(chunk)
                except httpx.HTTPError as exc:
                    raise MurError("E-DEPLOY-006", f"cannot fetch {self.spec}/{name}: {exc}", _FETCH_HINT) from exc
        return h.hexdigest()


_FETCH_HINT = ("put mur-<version>-<platform> and checksums.txt in the release source "
               "(--release-source DIR|https://BASE, or deploy.release_source in ~/.murmur/config.yaml)")


def fetch_release(version: str, plat: str, source: str, progress: Progress = _quiet) -> Bundle:
    """Fetch `mur-<version>-<plat>` from a release source, verify it, cache it (0755, atomic)."""
    name = bundle_filename(version, plat)
    src = _Source(source)
    sums = parse_checksums(src.read_text("checksums.txt"))
    want = sums.get(name)
    if not want:
        raise MurError("E-DEPLOY-006", f"checksums.txt in {source} has no entry for {name}", _FETCH_HINT)
    target = bin_dir() / name
    with locked(bin_dir() / f".{name}.lock"):
        if target.is_file() and file_sha256(target) == want:
            _write_sidecar(target, ".sha256", want)
            return _bundle(target, version, plat, "cache")
        progress(f"fetching {name} from {source}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{name}.{os.getpid()}.part")
        try:
            got = src.copy_to(name, tmp)
            if got != want:
                raise MurError("E-DEPLOY-006", f"{name} from {source} fails verification: sha256 {got} != {want} (checksums.txt)",
                               "the release source is corrupt or tampered with; fix it or choose another source")
            if tmp.stat().st_size == 0:
                raise MurError("E-DEPLOY-006", f"{name} from {source} is empty", _FETCH_HINT)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        _write_sidecar(target, ".sha256", want)
        return _bundle(target, version, plat, "release")


def resolve_bundle(version: str | None, plat: str | None = None, release_source: str | None = None,
                   progress: Progress = _quiet) -> Bundle:
    """The runtime for a pin: built locally when it is this mur's version, else fetched + verified."""
    version = version or __version__
    plat = plat or current_platform()
    if version == __version__ and plat == current_platform():
        return ensure_local_bundle(progress)
    source = release_source or configured_release_source()
    if not source:
        raise MurError(
            "E-DEPLOY-006",
            f"the capsule pins mur {version} ({plat}) but this is mur {__version__}, and no release source is configured",
            "pass --release-source DIR|https://BASE holding mur-<version>-<platform> + checksums.txt, "
            "or set deploy.release_source in ~/.murmur/config.yaml",
        )
    return fetch_release(version, plat, source, progress)


def use_explicit_bundle(path: Path, expect_version: str | None = None) -> Bundle:
    """A user-given runtime file (`--mur-binary`); its version is checked on the target."""
    if not path.is_file():
        raise MurError("E-IO-001", f"--mur-binary not found: {path}")
    version = expect_version or __version__
    digest = file_sha256(path)
    # Copied under a content-addressed name so it never clobbers a verified runtime of that version.
    target = bin_dir() / f"{bundle_filename(version, current_platform())}-custom-{digest[:12]}"
    if not (target.is_file() and file_sha256(target) == digest):
        _install_into_cache(path, target)
    return Bundle(path=target, version=version, platform=current_platform(), sha256=digest,
                  size=target.stat().st_size, origin="explicit")


def installed_runtime() -> Bundle:
    """This machine's installed mur as a runtime file (local target only): a tiny exec wrapper.

    Deploying to this machine at the local version needs no PyInstaller build: the wrapper runs
    the installed package with this interpreter, and `--version` is still checked like a bundle's.
    """
    name = bundle_filename(__version__, current_platform()) + "-py"
    target = bin_dir() / name
    text = f'#!/bin/sh\nexec {_sh_quote(sys.executable)} -m mur "$@"\n'.encode()
    if not target.is_file() or target.read_bytes() != text:
        atomic_write(target, text, 0o755)
    return Bundle(path=target, version=__version__, platform=current_platform(),
                  sha256=hashlib.sha256(text).hexdigest(), size=len(text), origin="installed")


def _sh_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
