"""Deployment credentials: the A2A bearer token and the service's TLS certificate.

Every deployment gets a random token (`secrets.token_urlsafe(32)`), kept 0600 on both ends: on the
target beside the deployment (`<root>/a2a-token`, written private from the first byte, handed to
the service as MURMUR_A2A_TOKEN_FILE) and here in `~/.murmur/deploy_keys/<id>/a2a-token` (the
record stores the path, never the token). A redeploy reuses the token, so clients keep working.

TLS is opt-in: the user's certificate and key (`--tls-cert/--tls-key`), or `--tls self-signed`,
generated here with `cryptography` (a paramiko dependency) for the target's host name or address
and kept in the same directory so redeploys reuse it. Clients pin the certificate's SHA-256 (DER)
fingerprint, which deploy prints and records (`mur send --pin-sha256`).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import secrets
import shutil
from pathlib import Path

from mur.deploy.steps import Tls
from mur.errors import MurError
from mur.fsutil import write_file
from mur.paths import murmur_home
from mur.resolve.files import file_ref


def keys_dir(dep_id: str) -> Path:
    """`~/.murmur/deploy_keys/<id>` (upstream's name for a deployment's local secrets)."""
    return murmur_home() / "deploy_keys" / dep_id


def token_for(dep_id: str) -> tuple[Path, bytes]:
    """The deployment's token file here (created 0600 on first use) and its contents."""
    path = keys_dir(dep_id) / "a2a-token"
    try:
        token = path.read_bytes().strip()
    except FileNotFoundError:
        token = b""
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read {path}: {exc.strerror or exc}") from exc
    if not token:
        token = secrets.token_urlsafe(32).encode()
        _write_private(path, token + b"\n")
    return path, token


def _write_private(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot create {path.parent}: {exc.strerror or exc}") from exc
    write_file(path, data, 0o600)


def forget(dep_id: str) -> None:
    """Remove the deployment's local secrets (destroy)."""
    shutil.rmtree(keys_dir(dep_id), ignore_errors=True)
    try:
        keys_dir(dep_id).parent.rmdir()  # the last deployment's keys: leave no empty directory
    except OSError:
        pass


def fingerprint(cert_pem: bytes) -> str:
    """SHA-256 of a PEM certificate's DER form (what `--pin-sha256` compares)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise MurError("E-DEPLOY-001", f"not a PEM certificate: {exc}", "--tls-cert takes a PEM file (-----BEGIN CERTIFICATE-----)") from exc
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


def _check_pair(cert_pem: bytes, key_pem: bytes, cert: Path, key: Path) -> None:
    """The key must be the certificate's: a mismatch is refused here, before any target is touched
    (the service would fail its TLS setup at start)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

    try:
        private = load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise MurError("E-DEPLOY-001", f"{key} is not an unencrypted PEM private key: {exc}",
                       "--tls-key takes an unencrypted PEM key (openssl pkey -in KEY -out PLAIN)") from exc
    public = x509.load_pem_x509_certificate(cert_pem).public_key()
    fmt = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*fmt) != public.public_bytes(*fmt):
        raise MurError("E-DEPLOY-001", f"the TLS key {key} does not belong to the certificate {cert}",
                       "give the key the certificate was issued for")


def _self_signed(host: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mur deploy {host}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName(list(dict.fromkeys(names))), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def tls_for(dep_id: str, mode: str | None, cert: Path | None, key: Path | None, host: str) -> Tls | None:
    """The certificate the service uses: the user's, a self-signed one (kept for redeploys), or none."""
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise MurError("E-DEPLOY-001", "--tls-cert and --tls-key go together", "give both, or --tls self-signed")
        for p in (cert, key):
            if not p.is_file():
                raise MurError("E-IO-001", f"TLS file not found: {p}")
        try:
            cert_pem, key_pem = cert.read_bytes(), key.read_bytes()
        except OSError as exc:
            raise MurError("E-IO-001", f"cannot read {exc.filename}: {exc.strerror or exc}") from exc
        pin = fingerprint(cert_pem)
        _check_pair(cert_pem, key_pem, cert, key)
        return Tls(file_ref(cert, "cert.pem"), file_ref(key, "key.pem"), pin)
    if mode is None:
        return None
    if mode != "self-signed":
        raise MurError("E-DEPLOY-001", f"--tls '{mode}' is not supported", "use --tls self-signed, or --tls-cert/--tls-key")
    d = keys_dir(dep_id)
    cert_path, key_path = d / "tls-cert.pem", d / "tls-key.pem"
    if not (cert_path.is_file() and key_path.is_file()):
        cert_pem, key_pem = _self_signed(host)
        _write_private(key_path, key_pem)
        _write_private(cert_path, cert_pem)
    return Tls(file_ref(cert_path, "cert.pem"), file_ref(key_path, "key.pem"), fingerprint(cert_path.read_bytes()))
