#!/bin/sh
# mur host checks and kernel fixes: one script for cloud-init (runcmd) and `mur host prepare`.
#
#   mur-host.sh facts                    what this host is: key=value lines (read-only, any user)
#   mur-host.sh plan [--kernel K] < F    facts on stdin -> the kernel-level changes this host needs,
#                                        one `id|reboot|what` line each; `refuse|-|why` when the
#                                        host cannot be prepared (pure: reads only its stdin)
#   mur-host.sh apply [--kernel K] ID..  make those changes (root); prints what it did; touches
#                                        /run/mur-reboot-required when a reboot must follow
#   mur-host.sh fix [--kernel K]         facts | plan | apply: what cloud-init runs at first boot
#
# K (the kernel choice): keep (default: the distribution's kernel, replaced only when it cannot
# run Landlock), 6.1 (Debian 12's kernel, Landlock ABI 2) or 6.12 (bookworm-security's cloud
# kernel, Landlock ABI 6). The packages and users mur needs are not here: cloud-init declares
# them, and `mur host prepare` plans them itself (mur/provision/hostplan.py).
set -eu

PACKAGES="sudo libseccomp2 python3"
REBOOT_FLAG=/run/mur-reboot-required
GRUB_CFG=/etc/default/grub.d/mur.cfg

kernel_package() {  # kernel choice -> Debian 12 package
  case "$1" in
    6.1) echo linux-image-cloud-amd64 ;;
    6.12) echo linux-image-6.12-cloud-amd64 ;;
    *) echo "" ;;
  esac
}

facts() {
  . /etc/os-release 2>/dev/null || true
  echo "os_id=${ID:-unknown}"
  echo "os_version=${VERSION_ID:-unknown}"
  echo "os_codename=${VERSION_CODENAME:-unknown}"
  echo "kernel=$(uname -r)"
  echo "arch=$(uname -m)"
  lsm=unknown
  if [ -r /sys/kernel/security/lsm ]; then lsm=$(cat /sys/kernel/security/lsm); fi
  echo "lsm=$lsm"
  cfg="/boot/config-$(uname -r)"
  landlock_config=unknown
  if [ -r "$cfg" ]; then
    if grep -q '^CONFIG_SECURITY_LANDLOCK=y' "$cfg"; then landlock_config=y; else landlock_config=n; fi
  fi
  echo "landlock_config=$landlock_config"
  abi=unknown
  if command -v python3 >/dev/null 2>&1; then
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): the ABI, or -1 without Landlock
    abi=$(python3 -c 'import ctypes; r = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1); print(max(r, 0))' 2>/dev/null || echo unknown)
  fi
  echo "landlock_abi=$abi"
  case "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" in
    cgroup2fs) cgroup=unified ;;
    tmpfs) if [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then cgroup=hybrid; else cgroup=legacy; fi ;;
    *) cgroup=none ;;
  esac
  echo "cgroup=$cgroup"
  if [ -d /run/systemd/system ]; then echo systemd=yes; else echo systemd=no; fi
  if [ -x /usr/sbin/update-grub ] && [ -f /etc/default/grub ]; then echo grub=yes; else echo grub=no; fi
  if [ -f "$GRUB_CFG" ]; then echo cmdline_fix=yes; else echo cmdline_fix=no; fi
  missing=""
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  echo "packages_missing=$(echo $missing | tr ' ' ,)"
  installed=""
  for k in 6.1 6.12; do
    dpkg-query -W -f='${Status}' "$(kernel_package $k)" 2>/dev/null | grep -q 'install ok installed' && installed="$installed $k"
  done
  echo "kernels_installed=$(echo $installed | tr ' ' ,)"
  if [ -f "$REBOOT_FLAG" ]; then echo reboot_pending=yes; else echo reboot_pending=no; fi
}

plan() {
  choice=keep
  while [ $# -gt 0 ]; do
    case "$1" in --kernel) choice="${2:-keep}"; shift 2 ;; *) shift ;; esac
  done
  [ -n "$choice" ] || choice=keep
  os_id="" os_version="" kernel="" lsm="" landlock_config="" landlock_abi="" cgroup="" grub="" cmdline_fix=""
  packages_missing="" kernels_installed="" reboot_pending="" systemd="" arch=""
  while IFS='=' read -r k v; do
    case "$k" in
      os_id|os_version|kernel|lsm|landlock_config|landlock_abi|cgroup|grub|cmdline_fix|packages_missing|kernels_installed|reboot_pending|systemd|arch)
        eval "$k=\$v" ;;
    esac
  done
  if [ "$os_id" != debian ] || [ "$os_version" != 12 ]; then
    echo "refuse|-|unsupported distribution ${os_id:-unknown} ${os_version:-?}: mur prepares Debian 12 (bookworm) hosts"
    return 0
  fi
  if [ "$arch" != x86_64 ]; then
    echo "refuse|-|unsupported architecture ${arch:-unknown}: the kernel choices are Debian's amd64 cloud kernels"
    return 0
  fi
  if [ "$systemd" != yes ]; then
    echo "refuse|-|systemd is not running: mur host prepare sets up systemd delegation"
    return 0
  fi
  case "$choice" in keep|6.1|6.12) ;; *)
    echo "refuse|-|unknown kernel choice '$choice' (keep, 6.1 or 6.12)"; return 0 ;;
  esac
  if [ -n "$packages_missing" ]; then
    echo "packages|no|install $(echo "$packages_missing" | tr , ' ')"
  fi
  running=other
  case "$kernel" in 6.1.*) running=6.1 ;; 6.12.*) running=6.12 ;; esac
  want=$choice
  if [ "$want" = keep ] && [ "$landlock_config" = n ]; then
    want=6.12  # this kernel has no Landlock at all: the newer distribution kernel has
  fi
  if [ "$want" != keep ] && [ "$want" != "$running" ]; then
    case ",$kernels_installed," in
      *",$want,"*) echo "kernel-$want|yes|boot the installed $(kernel_package "$want") (kernel $want)" ;;
      *) echo "kernel-$want|yes|install $(kernel_package "$want") (kernel $want, Landlock ABI $( [ "$want" = 6.12 ] && echo 6 || echo 2 )) and boot it" ;;
    esac
  fi
  need_cmdline=""
  if [ "$cgroup" != unified ]; then need_cmdline="cgroup v2 only (now $cgroup)"; fi
  case ",$lsm," in
    *,landlock,*|",unknown,") ;;
    *) if [ "$landlock_config" != n ]; then need_cmdline="${need_cmdline:+$need_cmdline; }Landlock in the active LSM list (now $lsm)"; fi ;;
  esac
  if [ -n "$need_cmdline" ] && [ "$cmdline_fix" != yes ]; then
    if [ "$grub" != yes ]; then
      echo "refuse|-|the kernel command line needs: $need_cmdline; this host does not boot through GRUB, so set systemd.unified_cgroup_hierarchy=1 and lsm=landlock,... on its command line yourself"
      return 0
    fi
    echo "cmdline|yes|kernel command line: $need_cmdline (/etc/default/grub.d/mur.cfg, update-grub)"
  elif [ -n "$need_cmdline" ]; then
    echo "reboot|yes|reboot into the fixed kernel command line ($need_cmdline)"
  elif [ "$reboot_pending" = yes ]; then
    echo "reboot|yes|reboot (a previous change is waiting for it)"
  fi
}

apply() {
  choice=keep
  ids=""
  while [ $# -gt 0 ]; do
    case "$1" in --kernel) choice="${2:-keep}"; shift 2 ;; *) ids="$ids $1"; shift ;; esac
  done
  here=$(dirname "$0")
  export DEBIAN_FRONTEND=noninteractive
  for id in $ids; do
    case "$id" in
      packages)
        missing=$(facts | sed -n 's/^packages_missing=//p' | tr , ' ')
        if [ -n "$missing" ]; then
          apt-get update -q
          apt-get install -y -q --no-install-recommends $missing
          echo "installed $missing"
        fi ;;
      kernel-6.1|kernel-6.12)
        k=${id#kernel-}
        pkg=$(kernel_package "$k")
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
          apt-get update -q
          apt-get install -y -q --no-install-recommends "$pkg"
          echo "installed $pkg"
        fi
        # GRUB boots the newest kernel first; a 6.1 choice on a 6.12 host needs an explicit default.
        if [ -f /etc/default/grub ] && [ -x /usr/sbin/update-grub ]; then update-grub >/dev/null 2>&1 || true; fi
        touch "$REBOOT_FLAG" ;;
      cmdline)
        mkdir -p "$(dirname "$GRUB_CFG")"
        cp "$here/mur-cmdline.cfg" "$GRUB_CFG.tmp" && mv "$GRUB_CFG.tmp" "$GRUB_CFG"
        update-grub >/dev/null 2>&1
        echo "wrote $GRUB_CFG"
        touch "$REBOOT_FLAG" ;;
      reboot)
        touch "$REBOOT_FLAG" ;;
      *) echo "mur-host.sh: unknown change '$id'" >&2; exit 2 ;;
    esac
  done
}

case "${1:-}" in
  facts) facts ;;
  plan) shift; plan "$@" ;;
  apply) shift; apply "$@" ;;
  fix)
    shift
    ids=$(facts | plan "$@" | while IFS='|' read -r id _ what; do
      if [ "$id" = refuse ]; then echo "mur-host.sh: $what" >&2; else echo "$id"; fi
    done)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || apply "$@" $ids ;;
  *) echo "usage: mur-host.sh facts | plan [--kernel K] | apply [--kernel K] ID... | fix [--kernel K]" >&2; exit 2 ;;
esac
