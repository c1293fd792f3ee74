#!/usr/bin/env bash
# Build the Debian 12 virtual machine the deploy integration tests boot under qemu (TCG).
#
#   integration/vm/build-vm.sh        # prints the output directory on stdout; no-op when cached
#
# Output ($MUR_CI_CACHE/vm/<hash of this script>/): disk.img (raw ext4, booted with -snapshot so it
# never changes), vmlinuz, initrd.img, id_ed25519[.pub] (the client key, authorized for root and
# for the non-root sudo user `deployer`), ssh_host_ed25519_key.pub (so tests verify the host key
# instead of trusting it), ready. The guest: kernel 6.1 (Landlock ABI 2), systemd 252 with pure
# cgroup v2, openssh, sudo, python3, libseccomp2 (environment.md section 11). qemu is started with
# restrict=on, so the guest can reach nothing: everything it needs is baked in here.
set -euo pipefail

cache="${MUR_CI_CACHE:-/var/cache/mur-ci}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
key="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
out="$cache/vm/$key"
if [[ -f "$out/ready" && -s "$out/disk.img" ]]; then
  echo "$out"
  exit 0
fi

for tool in debootstrap mkfs.ext4 qemu-system-x86_64 ssh-keygen; do
  command -v "$tool" >/dev/null || { apt-get update -q >&2; apt-get install -y -q --no-install-recommends \
    debootstrap e2fsprogs qemu-system-x86 openssh-client >&2; break; }
done

mkdir -p "$out"
work="$(mktemp -d /tmp/mur-vm-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
R="$work/rootfs"

echo "build-vm: debootstrap (about 90 s)" >&2
debootstrap --variant=minbase \
  --include=linux-image-amd64,systemd-sysv,openssh-server,python3,sudo,iproute2,udev,dbus,systemd-resolved,libseccomp2,ca-certificates,procps \
  bookworm "$R" "$mirror" >&2

echo testvm > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 testvm\n' > "$R/etc/hosts"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' > "$R/etc/fstab"
mkdir -p "$R/etc/systemd/network"
printf '[Match]\nName=en*\n\n[Network]\nDHCP=yes\n' > "$R/etc/systemd/network/10-en.network"
chroot "$R" systemctl enable systemd-networkd ssh >&2
chroot "$R" systemctl mask systemd-networkd-wait-online.service >&2

# Keys: one client key for root and deployer; one fixed ed25519 host key the tests pin.
rm -f "$out"/id_ed25519 "$out"/id_ed25519.pub
ssh-keygen -q -t ed25519 -N '' -C mur-vm-client -f "$out/id_ed25519"
rm -f "$R"/etc/ssh/ssh_host_*
ssh-keygen -q -t ed25519 -N '' -C testvm -f "$R/etc/ssh/ssh_host_ed25519_key"
cp "$R/etc/ssh/ssh_host_ed25519_key.pub" "$out/ssh_host_ed25519_key.pub"
cat > "$R/etc/ssh/sshd_config.d/mur-test.conf" <<CONF
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
CONF
install -d -m 700 "$R/root/.ssh"
install -m 600 "$out/id_ed25519.pub" "$R/root/.ssh/authorized_keys"
chroot "$R" useradd -m -s /bin/bash deployer
install -d -m 700 "$R/home/deployer/.ssh"
install -m 600 "$out/id_ed25519.pub" "$R/home/deployer/.ssh/authorized_keys"
chroot "$R" chown -R deployer:deployer /home/deployer/.ssh
printf 'deployer ALL=(ALL) NOPASSWD:ALL\n' > "$R/etc/sudoers.d/deployer"
chmod 440 "$R/etc/sudoers.d/deployer"
# Quieter, faster boots under emulation.
chroot "$R" systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer >&2 || true
chroot "$R" apt-get clean

cp "$R"/boot/vmlinuz-* "$out/vmlinuz"
cp "$R"/boot/initrd.img-* "$out/initrd.img"
rm -f "$out/disk.img"
truncate -s 3G "$out/disk.img.tmp"
mkfs.ext4 -q -F -L root -d "$R" "$out/disk.img.tmp"
mv "$out/disk.img.tmp" "$out/disk.img"
touch "$out/ready"
echo "build-vm: ready in $out" >&2
echo "$out"
