# Offline checks of the rendered user-data (terraform test; no provider, nothing created).

variables {
  deploy_user         = "deployer"
  ssh_authorized_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3RrZXl0ZXN0a2V5dGVzdGtleXRlc3RrZXkx ci@mur"]
}

run "renders_the_deploy_host" {
  command = plan

  assert {
    condition     = startswith(output.user_data, "#cloud-config\n")
    error_message = "user-data must start with #cloud-config"
  }
  assert {
    condition     = yamldecode(output.user_data).users[0].name == "deployer" && yamldecode(output.user_data).users[0].groups == "mur-deploy"
    error_message = "the deploy user is created in group mur-deploy"
  }
  assert {
    condition     = jsonencode(yamldecode(output.user_data).users[0].ssh_authorized_keys) == jsonencode(var.ssh_authorized_keys) && yamldecode(output.user_data).users[0].lock_passwd
    error_message = "the deploy user logs in with the given keys only"
  }
  assert {
    condition     = yamldecode(output.user_data).groups == ["mur-deploy"]
    error_message = "the mur-deploy group is created"
  }
  assert {
    condition = { for f in yamldecode(output.user_data).write_files : f.path => f.content } == {
      "/etc/sudoers.d/mur-deploy"                             = file("${path.module}/../../../deploy/sudoers/mur-deploy")
      "/etc/systemd/system/user@.service.d/mur-delegate.conf" = file("${path.module}/../../../deploy/systemd/mur-delegate.conf")
      "/etc/systemd/system/mur-.service.d/mur-delegate.conf"  = file("${path.module}/../../../deploy/systemd/mur-delegate.conf")
      "/usr/local/lib/mur/mur-host.sh"                        = file("${path.module}/../../../deploy/host/mur-host.sh")
      "/usr/local/lib/mur/mur-cmdline.cfg"                    = file("${path.module}/../../../deploy/host/mur-cmdline.cfg")
      "/usr/local/lib/mur/mur-deploy-helper"                  = file("${path.module}/../../../deploy/host/mur-deploy-helper")
      "/etc/mur/host.json"                                    = "{\"deploy_user\":\"deployer\",\"kernel\":\"keep\",\"mur_version\":\"0.1.0\"}\n"
    }
    error_message = "write_files carries deploy/'s files byte for byte"
  }
  assert {
    condition     = one([for f in yamldecode(output.user_data).write_files : f.permissions if f.path == "/etc/sudoers.d/mur-deploy"]) == "0440"
    error_message = "the sudoers rule is 0440"
  }
  assert {
    condition     = strcontains(file("${path.module}/../../../deploy/systemd/mur-delegate.conf"), "Delegate=memory pids cpu io")
    error_message = "the drop-in delegates memory pids cpu io"
  }
  assert {
    condition     = yamldecode(output.user_data).runcmd[1] == ["sh", "/usr/local/lib/mur/mur-host.sh", "fix", "--kernel", "keep"]
    error_message = "the kernel checks run at first boot with the kernel choice"
  }
  assert {
    condition     = yamldecode(output.user_data).power_state.condition == "test -f /run/mur-reboot-required"
    error_message = "reboot only when a kernel change asks for it"
  }
  assert {
    condition     = !can(yamldecode(output.user_data).ssh_keys) && output.known_hosts_line == null
    error_message = "without a host key, cloud-init generates one and there is nothing to pin"
  }
  assert {
    condition     = output.deploy_command == "mur deploy --host HOST --ssh-user deployer"
    error_message = "the deploy command names the deploy user"
  }
}

run "pins_a_given_host_key" {
  command = plan

  variables {
    kernel               = "6.12"
    host                 = "203.0.113.7"
    ssh_host_key_private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    ssh_host_key_public  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3RrZXlob3N0a2V5aG9zdGtleWhvc3RrZXkx"
  }

  assert {
    condition     = yamldecode(output.user_data).ssh_keys.ed25519_public == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3RrZXlob3N0a2V5aG9zdGtleWhvc3RrZXkx"
    error_message = "the given host key is installed"
  }
  assert {
    condition     = output.known_hosts_line == "203.0.113.7 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhvc3RrZXlob3N0a2V5aG9zdGtleWhvc3RrZXkx"
    error_message = "the known_hosts line pins it"
  }
  assert {
    condition     = yamldecode(output.user_data).runcmd[1][4] == "6.12" && output.deploy_command == "mur deploy --host 203.0.113.7 --ssh-user deployer"
    error_message = "the kernel choice and host reach the outputs"
  }
}

run "yaml_cannot_be_injected_through_the_user_name" {
  command = plan
  variables {
    deploy_user = "x\n  sudo: ALL"
  }
  expect_failures = [var.deploy_user]
}

run "root_is_not_a_deploy_user" {
  command = plan
  variables {
    deploy_user = "root"
  }
  expect_failures = [var.deploy_user]
}

run "a_key_with_a_newline_is_refused" {
  command = plan
  variables {
    ssh_authorized_keys = ["ssh-ed25519 AAAA x\nruncmd: [reboot]"]
  }
  expect_failures = [var.ssh_authorized_keys]
}

run "no_keys_is_refused" {
  command = plan
  variables {
    ssh_authorized_keys = []
  }
  expect_failures = [var.ssh_authorized_keys]
}

run "unknown_kernel_is_refused" {
  command = plan
  variables {
    kernel = "5.10"
  }
  expect_failures = [var.kernel]
}
