# A Hetzner Cloud server prepared as a mur deploy host. Needs the hcloud provider (downloaded by
# `terraform init`), HCLOUD_TOKEN, and the module next door. The host key is generated here
# (tls provider) and installed by cloud-init, so the first `mur deploy` verifies it.
terraform {
  required_providers {
    hcloud = { source = "hetznercloud/hcloud", version = "~> 1.48" }
    tls    = { source = "hashicorp/tls", version = "~> 4.0" }
  }
}

variable "ssh_public_key" {
  description = "Your public key line (for the deploy user)."
  type        = string
}

variable "server_type" {
  type    = string
  default = "cx22"
}

variable "location" {
  type    = string
  default = "fsn1"
}

resource "tls_private_key" "host" {
  algorithm = "ED25519"
}

module "mur_host" {
  source               = "../../modules/mur-host"
  deploy_user          = "mur"
  ssh_authorized_keys  = [var.ssh_public_key]
  kernel               = "6.12"
  ssh_host_key_public  = trimspace(tls_private_key.host.public_key_openssh)
  ssh_host_key_private = tls_private_key.host.private_key_openssh
}

resource "hcloud_server" "mur" {
  name        = "mur-host"
  image       = "debian-12"
  server_type = var.server_type
  location    = var.location
  user_data   = module.mur_host.user_data
}

output "known_hosts_line" {
  value = "${hcloud_server.mur.ipv4_address} ${trimspace(tls_private_key.host.public_key_openssh)}"
}

output "deploy_command" {
  value = "mur deploy --host ${hcloud_server.mur.ipv4_address} --ssh-user mur"
}
