# A DigitalOcean droplet prepared as a mur deploy host. Needs the digitalocean provider,
# DIGITALOCEAN_TOKEN, and the module next door; the host key is generated here and pinned.
terraform {
  required_providers {
    digitalocean = { source = "digitalocean/digitalocean", version = "~> 2.40" }
    tls          = { source = "hashicorp/tls", version = "~> 4.0" }
  }
}

variable "ssh_public_key" {
  description = "Your public key line (for the deploy user)."
  type        = string
}

variable "region" {
  type    = string
  default = "fra1"
}

resource "tls_private_key" "host" {
  algorithm = "ED25519"
}

module "mur_host" {
  source               = "../../modules/mur-host"
  ssh_authorized_keys  = [var.ssh_public_key]
  kernel               = "6.12"
  ssh_host_key_public  = trimspace(tls_private_key.host.public_key_openssh)
  ssh_host_key_private = tls_private_key.host.private_key_openssh
}

resource "digitalocean_droplet" "mur" {
  name      = "mur-host"
  image     = "debian-12-x64"
  size      = "s-1vcpu-2gb"
  region    = var.region
  user_data = module.mur_host.user_data
}

output "known_hosts_line" {
  value = "${digitalocean_droplet.mur.ipv4_address} ${trimspace(tls_private_key.host.public_key_openssh)}"
}

output "deploy_command" {
  value = "mur deploy --host ${digitalocean_droplet.mur.ipv4_address} --ssh-user mur"
}
