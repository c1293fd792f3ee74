output "user_data" {
  description = "The #cloud-config user-data to give the server (cloud-init)."
  value       = local.user_data
  sensitive   = true # it carries the host private key when ssh_host_key_private is given
}

output "deploy_command" {
  description = "The mur deploy line for this host (pin its host key first: known_hosts_line)."
  value       = "mur deploy --host ${local.host_label} --ssh-user ${var.deploy_user}"
}

output "host_key_public" {
  description = "The server's ed25519 host public key when ssh_host_key_public was given, else null."
  value       = var.ssh_host_key_public == "" ? null : var.ssh_host_key_public
}

output "known_hosts_line" {
  description = "A known_hosts line pinning the host key (needs ssh_host_key_public and host), else null."
  value       = var.ssh_host_key_public == "" || var.host == "" ? null : "${var.host} ${var.ssh_host_key_public}"
}
