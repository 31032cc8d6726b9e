"""Giving freed memory back to the system (glibc's malloc; elsewhere every call is a no-op).

The operator's memory peaks while a fleet converges: every deployment's reconcile runs at once,
each holding its parsed objects, node facts and agent answers. Python frees them after, but
glibc keeps the freed chunks in its heap, so the process stays at its peak: at 500 nodes x
1,000 deployments the operator held about 500 MB while its live Python objects were about
165 MB (tracemalloc), and one `malloc_trim` gave back 120 MB at once. So:
- `limit_arenas`, before any thread starts: at most `ARENAS` malloc arenas (glibc makes up to
  eight per core, one per thread that allocates; each keeps its own freed chunks);
- `keep_trimmed`: `malloc_trim(0)` every `TRIM_EVERY_S` seconds, in a worker thread (ctypes
  releases the GIL: the event loop runs on; a trim of a 400 MB heap takes a few milliseconds).
The Python objects themselves are unchanged: this returns only memory nothing uses.

May import: the standard library. Called by: `mlxfleet_operator.main`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger("mlxfleet.heap")
ARENAS = 2  # the event loop's thread and the fleet's agent I/O thread allocate most
TRIM_EVERY_S = 5.0
_M_ARENA_MAX = -8  # mallopt's parameter number (glibc malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, when this process runs on it (None: macOS, musl, or no C library found)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):  # not glibc: no malloc_trim / mallopt
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas; True when glibc took it. Call before threads start."""
    libc = _glibc()
    return libc is not None and libc.mallopt(_M_ARENA_MAX, arenas) == 1


def trim() -> bool:
    """Give the heap's free pages back to the system now; True when any were given back."""
    libc = _glibc()
    return libc is not None and libc.malloc_trim(0) == 1


async def keep_trimmed(every: float = TRIM_EVERY_S) -> None:
    """`trim` every `every` seconds until cancelled (returns at once where there is no glibc)."""
    if _glibc() is None:
        return
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(trim)
        except RuntimeError:  # the loop's executor is shutting down: the operator is stopping
            return
