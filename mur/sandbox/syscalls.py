"""The syscall names the seccomp allowlist is made of (data only; ``policy.py`` decides with it).

Derived from Docker's default profile (moby ``profiles/seccomp/default.json``, the unconditional
SCMP_ACT_ALLOW group), minus what a shell tool never needs and that has been an escape or
cross-process surface: io_uring (its ring operations bypass seccomp), ptrace and
process_vm_*/process_madvise/process_mrelease/pidfd_getfd (reach into another process),
name_to_handle_at, fanotify_mark, memfd_secret, modify_ldt, the 32-bit multiplexers socketcall and
ipc (they would bypass the socket() argument checks), and the node-wide clock adjusters. Names a
libseccomp build does not know for this architecture (the ``*32`` and ``*_time64`` variants on
x86_64, say) are skipped when the filter is compiled; syscalls newer than libseccomp (fchmodat2,
cachestat, map_shadow_stack, ...) are therefore refused with ENOSYS, which libc treats as "not
implemented" and falls back from.
"""

from __future__ import annotations

ALLOWED = (
    # files and directories (Landlock decides which paths)
    "access", "faccessat", "faccessat2", "open", "openat", "openat2", "creat", "close", "close_range",
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "pwritev2",
    "lseek", "_llseek", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "fcntl64", "flock", "ioctl",
    "stat", "stat64", "lstat", "lstat64", "fstat", "fstat64", "newfstatat", "fstatat64", "statx",
    "statfs", "statfs64", "fstatfs", "fstatfs64", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat", "mknod", "mknodat",
    "chmod", "fchmod", "fchmodat", "chown", "chown32", "fchown", "fchown32", "fchownat", "lchown", "lchown32",
    "truncate", "truncate64", "ftruncate", "ftruncate64", "fallocate", "fadvise64", "fadvise64_64",
    "readahead", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "umask",
    "utime", "utimes", "utimensat", "utimensat_time64", "futimesat",
    "getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr",
    "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    "copy_file_range", "sendfile", "sendfile64", "splice", "tee", "vmsplice",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
    # memory
    "brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync",
    "mlock", "mlock2", "mlockall", "munlock", "munlockall", "remap_file_pages", "membarrier",
    "memfd_create", "pkey_alloc", "pkey_free", "pkey_mprotect", "get_mempolicy", "set_mempolicy", "mbind",
    # processes, threads, signals (another process is reachable only inside the session: see policy.py)
    "clone", "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "waitpid",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
    "rt_sigaction", "rt_sigprocmask", "rt_sigpending", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigtimedwait_time64", "sigaltstack", "sigprocmask", "sigreturn",
    "signalfd", "signalfd4", "restart_syscall", "pause", "alarm", "getitimer", "setitimer",
    "set_tid_address", "set_robust_list", "get_robust_list", "set_thread_area", "get_thread_area",
    "arch_prctl", "rseq", "prctl", "capget", "capset", "seccomp",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "futex", "futex_time64", "futex_waitv", "sched_yield", "sched_getaffinity", "sched_setaffinity",
    "sched_getattr", "sched_setattr", "sched_getparam", "sched_setparam", "sched_getscheduler",
    "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_rr_get_interval_time64", "getpriority", "setpriority",
    "ioprio_get", "ioprio_set", "getrlimit", "ugetrlimit", "setrlimit", "prlimit64", "getrusage",
    "getpid", "getppid", "gettid", "getpgid", "getpgrp", "setpgid", "getsid", "setsid",
    "getuid", "getuid32", "geteuid", "geteuid32", "getgid", "getgid32", "getegid", "getegid32",
    "getresuid", "getresuid32", "getresgid", "getresgid32", "getgroups", "getgroups32",
    "setuid", "setuid32", "setgid", "setgid32", "setreuid", "setreuid32", "setregid", "setregid32",
    "setresuid", "setresuid32", "setresgid", "setresgid32", "setfsuid", "setfsuid32", "setfsgid",
    "setfsgid32", "setgroups", "setgroups32",
    # time
    "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64", "clock_nanosleep",
    "clock_nanosleep_time64", "nanosleep", "gettimeofday", "time", "times",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64",
    "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
    "timerfd_settime", "timerfd_settime64",
    # waiting on many fds
    "select", "_newselect", "pselect6", "pselect6_time64", "poll", "ppoll", "ppoll_time64",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_wait", "epoll_wait_old",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    # sockets (which families, types and protocols: the argument rules in policy.py)
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "shutdown",
    "getsockname", "getpeername", "getsockopt", "setsockopt",
    "send", "sendto", "sendmsg", "sendmmsg", "recv", "recvfrom", "recvmsg", "recvmmsg", "recvmmsg_time64",
    # System V and POSIX IPC (private IPC namespace per session where the host allows one)
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semtimedop_time64", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedsend_time64",
    "mq_timedreceive", "mq_timedreceive_time64", "mq_notify", "mq_getsetattr",
    # system information
    "uname", "sysinfo", "getcpu", "getrandom",
)

# Refused with EPERM (named, so a tool sees "Operation not permitted" rather than "not
# implemented"): kernel-attack and escape surface, and every call that reaches into another process.
REFUSED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "process_mrelease",
    "pidfd_getfd", "kcmp",
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "fanotify_init", "fanotify_mark",
    "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "modify_ldt", "uselib",
    "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64", "adjtimex",
    "sethostname", "setdomainname", "migrate_pages", "move_pages", "memfd_secret",
)

# clone3 passes its flags in a struct seccomp cannot read: ENOSYS makes libc fall back to clone(),
# whose flags the filter checks (what Docker and systemd do).
ENOSYS = ("clone3",)

# personality(2) values Docker allows: query (0xffffffff), PER_LINUX, PER_LINUX32, and both with
# UNAME26 (0x20000). Anything else (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE) is refused.
PERSONALITY_VALUES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
