variable "deploy_user" {
  description = "The non-root user `mur deploy --ssh-user` logs in as (SSH keys only, passwordless sudo for mur's steps)."
  type        = string
  default     = "mur"
  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.deploy_user)) && var.deploy_user != "root"
    error_message = "deploy_user must be a plain login name (lowercase letters, digits, _ and -, at most 32 characters), not root."
  }
}

variable "ssh_authorized_keys" {
  description = "Public keys (authorized_keys lines) allowed to log in as the deploy user."
  type        = list(string)
  validation {
    condition     = length(var.ssh_authorized_keys) > 0 && alltrue([for k in var.ssh_authorized_keys : can(regex("^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh.com) [A-Za-z0-9+/=]+( [^\\n]*)?$", k))])
    error_message = "ssh_authorized_keys needs at least one key, each one authorized_keys line (type, base64, optional comment) without newlines."
  }
}

variable "mur_version" {
  description = "The mur version the host is prepared for (recorded in /etc/mur/host.json; mur deploy uploads its pinned runtime itself)."
  type        = string
  default     = "0.1.0"
  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+([-+][0-9A-Za-z.-]+)?$", var.mur_version))
    error_message = "mur_version must be a version such as 0.1.0."
  }
}

variable "kernel" {
  description = "keep (the distribution's kernel; replaced only when it cannot run Landlock), 6.1 (Landlock ABI 2) or 6.12 (bookworm-security cloud kernel, Landlock ABI 6)."
  type        = string
  default     = "keep"
  validation {
    condition     = contains(["keep", "6.1", "6.12"], var.kernel)
    error_message = "kernel must be one of: keep, 6.1, 6.12."
  }
}

variable "ssh_host_key_public" {
  description = "Optional ed25519 host public key (\"ssh-ed25519 AAAA...\") for the server, so its host key can be pinned before first contact. Empty: cloud-init generates one."
  type        = string
  default     = ""
  validation {
    condition     = var.ssh_host_key_public == "" || can(regex("^ssh-ed25519 [A-Za-z0-9+/=]+( [^\\n]*)?$", var.ssh_host_key_public))
    error_message = "ssh_host_key_public must be one ssh-ed25519 public key line."
  }
}

variable "ssh_host_key_private" {
  description = "The OpenSSH private key matching ssh_host_key_public (it ends up in the user-data: keep the state private)."
  type        = string
  default     = ""
  sensitive   = true
}

variable "host" {
  description = "The address the host will have, when known (for the deploy_command and known_hosts_line outputs)."
  type        = string
  default     = ""
}
