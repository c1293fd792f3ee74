"""Provisioning: hosts made ready for `mur deploy`, and local VMs to try it on.

``assets`` finds deploy/'s files (package data), ``userdata`` renders the cloud-init user-data
from deploy/'s template (the same text terraform/modules/mur-host renders), ``hostplan`` turns
host facts into the list of changes (pure), ``prepare`` applies it over SSH (``remote`` is the one
adapter to mur.deploy), ``image`` builds Debian VM images with debootstrap, ``qemu`` boots them,
``machines`` keeps the local VMs of `mur vm`.
"""
