"""The cloud-init user-data of a mur deploy host, rendered from deploy/cloud-init/user-data.yaml.tftpl.

terraform/modules/mur-host renders the same template with `templatefile`; this is its twin for
`mur vm create` and scripts, and a test keeps the two byte-identical. The template only has
`${name}` placeholders, each filled with a JSON-encoded value (encoded the way terraform's
jsonencode does it) or with one optional whole line, so no input can add YAML of its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from mur import __version__
from mur.errors import MurError
from mur.provision import assets

TEMPLATE = "cloud-init/user-data.yaml.tftpl"
KERNELS = ("keep", "6.1", "6.12")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_KEY = re.compile(r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com) "
                  r"[A-Za-z0-9+/=]+( [^\n]*)?$")
_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)\}")


@dataclass(frozen=True)
class UserDataInputs:
    """The terraform module's variables, with the same defaults and validation."""

    ssh_authorized_keys: tuple[str, ...]
    deploy_user: str = "mur"
    mur_version: str = __version__
    kernel: str = "keep"
    ssh_host_key_public: str = ""
    ssh_host_key_private: str = field(default="", repr=False)

    def validate(self) -> None:
        if not _USER.match(self.deploy_user) or self.deploy_user == "root":
            raise MurError("E-DEPLOY-001", f"deploy user {self.deploy_user!r} is not a plain login name (or is root)",
                           "use lowercase letters, digits, _ and -, at most 32 characters, e.g. --deploy-user mur")
        if not self.ssh_authorized_keys:
            raise MurError("E-DEPLOY-001", "no SSH public key for the deploy user", "pass the key the deploy will use")
        for key in self.ssh_authorized_keys:
            if not _KEY.match(key):
                raise MurError("E-DEPLOY-001", f"not one authorized_keys line: {key[:60]!r}",
                               "give the public key line (type, base64, optional comment), without newlines")
        if self.kernel not in KERNELS:
            raise MurError("E-DEPLOY-001", f"unknown kernel choice {self.kernel!r}", f"use one of: {', '.join(KERNELS)}")
        if self.ssh_host_key_public and not self.ssh_host_key_public.startswith("ssh-ed25519 "):
            raise MurError("E-DEPLOY-001", "the host key must be an ssh-ed25519 key")


def tf_json(value: object) -> str:
    """JSON as terraform's jsonencode writes it: compact, UTF-8, and <, >, &, U+2028/9 escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def marker(inp: UserDataInputs) -> str:
    """/etc/mur/host.json: what the host was prepared for (the same text prepare writes)."""
    return tf_json({"deploy_user": inp.deploy_user, "kernel": inp.kernel, "mur_version": inp.mur_version}) + "\n"


def template_values(inp: UserDataInputs) -> dict[str, str]:
    host_keys = ""
    if inp.ssh_host_key_public:
        host_keys = "ssh_keys: " + tf_json({"ed25519_private": inp.ssh_host_key_private,
                                            "ed25519_public": inp.ssh_host_key_public})
    return {
        "deploy_user": tf_json(inp.deploy_user),
        "ssh_authorized_keys": tf_json(list(inp.ssh_authorized_keys)),
        "sudoers": tf_json(assets.read_text("sudoers/mur-deploy")),
        "delegate": tf_json(assets.read_text("systemd/mur-delegate.conf")),
        "host_script": tf_json(assets.read_text("host/mur-host.sh")),
        "cmdline_cfg": tf_json(assets.read_text("host/mur-cmdline.cfg")),
        "deploy_helper": tf_json(assets.read_text("host/mur-deploy-helper")),
        "marker": tf_json(marker(inp)),
        "kernel": tf_json(inp.kernel),
        "ssh_host_keys": host_keys,
    }


def render(inp: UserDataInputs) -> str:
    """The #cloud-config text; E-DEPLOY-001 for inputs the terraform module would also refuse."""
    inp.validate()
    values = template_values(inp)
    template = assets.read_text(TEMPLATE)

    def fill(m: re.Match) -> str:
        try:
            return values[m.group(1)]
        except KeyError:
            raise MurError("E-IO-003", f"{TEMPLATE}: unknown placeholder {m.group(0)}") from None

    return _PLACEHOLDER.sub(fill, template)
