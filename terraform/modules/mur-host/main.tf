# The user-data comes from deploy/'s template, the one mur itself renders (mur.provision.userdata);
# every value is JSON-encoded first, so inputs cannot inject YAML.
locals {
  assets = "${path.module}/../../../deploy"

  marker = "${jsonencode({
    deploy_user = var.deploy_user
    kernel      = var.kernel
    mur_version = var.mur_version
  })}\n"

  ssh_host_keys = var.ssh_host_key_public == "" ? "" : "ssh_keys: ${jsonencode({
    ed25519_private = var.ssh_host_key_private
    ed25519_public  = var.ssh_host_key_public
  })}"

  user_data = templatefile("${local.assets}/cloud-init/user-data.yaml.tftpl", {
    deploy_user         = jsonencode(var.deploy_user)
    ssh_authorized_keys = jsonencode(var.ssh_authorized_keys)
    sudoers             = jsonencode(file("${local.assets}/sudoers/mur-deploy"))
    delegate            = jsonencode(file("${local.assets}/systemd/mur-delegate.conf"))
    host_script         = jsonencode(file("${local.assets}/host/mur-host.sh"))
    cmdline_cfg         = jsonencode(file("${local.assets}/host/mur-cmdline.cfg"))
    deploy_helper       = jsonencode(file("${local.assets}/host/mur-deploy-helper"))
    marker              = jsonencode(local.marker)
    kernel              = jsonencode(var.kernel)
    ssh_host_keys       = local.ssh_host_keys
  })

  host_label = var.host == "" ? "HOST" : var.host
}
