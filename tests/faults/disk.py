"""A small real filesystem (ext4 on a sparse loop image) to fill up: an agent's models dir on a
disk that runs out of space in the middle of a download, and gets it back.

`fill(leave)` takes all but `leave` bytes with one preallocated file (no data written, so the
image stays sparse); `free()` deletes it. Needs root (mount); unmounted and deleted on exit.
May import: the standard library. Called by: tests/faults.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def _run(*cmd: str) -> None:
    subprocess.run(list(cmd), check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Disk:
    mount: Path

    @property
    def filler(self) -> Path:
        return self.mount / "filler"

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.mount).free

    def fill(self, leave: int) -> None:
        size = self.free_bytes() - leave
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(mount: Path, *, size_mb: int) -> Iterator[Disk]:
    image = mount.parent / f"{mount.name}.img"
    mount.mkdir(parents=True, exist_ok=True)
    with image.open("wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop", str(image), str(mount))
    try:
        yield Disk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)
        image.unlink(missing_ok=True)
