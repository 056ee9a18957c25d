"""Is a folder on storage that other machines see? One rule for sweeps on Slurm (the home folder) and
for a run across several nodes (its run folder, which rank 0 writes and every rank reads)."""

from __future__ import annotations

from pathlib import Path

SHARED_FILESYSTEMS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "fuse.glusterfs", "glusterfs",
                      "panfs", "wekafs", "fuse.sshfs", "cifs", "smb3", "fuse.juicefs"}


def filesystem_type(path: Path) -> str | None:
    """The file-system type of ``path`` from /proc/mounts (the longest mount point that contains it)."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    resolved = str(path.resolve())
    best = max((m for m in mounts if resolved == m[0] or resolved.startswith(m[0].rstrip("/") + "/")),
               key=lambda m: len(m[0]), default=None)
    return best[1] if best else None


def local_filesystem(path: Path) -> str | None:
    """The file-system type of ``path`` when it looks local to this machine (ext4, xfs, tmpfs...), else None
    (a shared one, or unknown)."""
    fs = filesystem_type(path)
    return None if fs is None or fs in SHARED_FILESYSTEMS else fs
