# An EC2 instance (Debian 12 AMI) prepared as a mur deploy host. Needs the aws provider and
# credentials, a subnet and security group allowing SSH from you, and the module next door.
terraform {
  required_providers {
    aws = { source = "hashicorp/aws", version = "~> 5.0" }
    tls = { source = "hashicorp/tls", version = "~> 4.0" }
  }
}

variable "ssh_public_key" {
  description = "Your public key line (for the deploy user)."
  type        = string
}

variable "subnet_id" {
  type = string
}

variable "security_group_ids" {
  type = list(string)
}

data "aws_ami" "debian12" {
  most_recent = true
  owners      = ["136693071363"] # Debian
  filter {
    name   = "name"
    values = ["debian-12-amd64-*"]
  }
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

resource "aws_instance" "mur" {
  ami                         = data.aws_ami.debian12.id
  instance_type               = "t3.small"
  subnet_id                   = var.subnet_id
  vpc_security_group_ids      = var.security_group_ids
  associate_public_ip_address = true
  user_data                   = module.mur_host.user_data
  metadata_options {
    http_tokens = "required"
  }
}

output "known_hosts_line" {
  value = "${aws_instance.mur.public_ip} ${trimspace(tls_private_key.host.public_key_openssh)}"
}

output "deploy_command" {
  value = "mur deploy --host ${aws_instance.mur.public_ip} --ssh-user mur"
}
