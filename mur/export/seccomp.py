"""The pod's seccomp profile (`seccompProfile: Localhost`), shipped beside the exported manifests.

Why a profile of our own: the runtime's default profile on older nodes predates Landlock and answers
its three syscalls with EPERM, which would leave mur's kernel sandbox unenforced. This profile
allows Landlock explicitly and refuses what a container never needs (the list Docker's default
profile refuses to a container without capabilities: kernel modules, kexec, bpf, perf, keyrings,
namespaces, the mount API). It is default-allow, like images/seccomp-landlock.json, which the
Docker target uses; the pod's also refuses mount(2), since no capability is left to use it
(tests/export keeps this list a superset of that file's).
"""

from __future__ import annotations

import json

PROFILE_NAME = "mur-landlock.json"  # localhostProfile: relative to the kubelet's seccomp root

LANDLOCK = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
DENIED = (
    "_sysctl", "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "fanotify_init", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms",
    "get_mempolicy", "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl",
    "lookup_dcookie", "mbind", "mount", "mount_setattr", "move_mount", "move_pages", "name_to_handle_at",
    "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open", "personality", "pivot_root",
    "process_vm_readv", "process_vm_writev", "query_module", "quotactl", "reboot", "request_key",
    "set_mempolicy", "setns", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "umount", "umount2",
    "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)
EPERM = 1


def profile() -> dict:
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64"],
        "syscalls": [
            {"names": list(LANDLOCK), "action": "SCMP_ACT_ALLOW"},
            {"names": sorted(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
        ],
    }


def profile_bytes() -> bytes:
    return (json.dumps(profile(), indent=2) + "\n").encode()
