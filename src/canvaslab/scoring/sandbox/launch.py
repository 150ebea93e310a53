"""The first step of a jail: a /tmp bounded in bytes AND in inodes, then ``exec`` bubblewrap.

Run as ``python -I -S -c <this file's text> SIZE INODES BWRAP ARGS...`` (standard library only). bwrap's
``--tmpfs`` takes a size but no inode limit, and a tmpfs of 8 MiB holds hundreds of MiB of kernel memory
in empty files. So this process enters a user and mount namespace of its own (unprivileged: its user is
mapped to itself), mounts a tmpfs with ``size=SIZE,nr_inodes=INODES`` over /tmp there, which only this
namespace sees, and becomes bwrap (same pid: ``--die-with-parent`` and ``--info-fd`` work as before),
which binds that /tmp into the jail. Any failure is one line on stderr and exit status 70.
"""

import ctypes
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000


def fail(step):
    sys.stderr.write(f"canvaslab sandbox launch: {step}: {os.strerror(ctypes.get_errno())}\n")
    sys.exit(70)


def main(size, inodes, argv):
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        fail("unshare(user, mount)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        fail("mount --make-rprivate /")
    options = f"size={int(size)},nr_inodes={int(inodes)},mode=0700".encode()
    if libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        fail("mount tmpfs /tmp")
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
