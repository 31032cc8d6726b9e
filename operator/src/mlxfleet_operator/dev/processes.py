"""Long-lived child processes of the dev tooling: free loopback ports, spawn, terminate, reap.

Generic (nothing here knows about etcd or Kubernetes): the control plane, the demo, the test
fixtures and the benchmarks start their etcd, kube-apiserver, agents, operators and gateways with
`spawn` and stop them with `terminate`, which SIGTERMs a whole process group, SIGKILLs what is
left after a grace period and reaps the processes this interpreter started (none is left a zombie).
May import: the standard library only. Called by: dev.controlplane, dev.demo, tests/support,
tests/e2e, benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Popen objects of processes this interpreter started, kept so they are reaped (not leaked) on stop.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


# Ports this interpreter has handed out. A port is free only until its user binds it, and a user
# such as kopf's liveness server binds seconds after start: without this record a second call in
# that window can hand out the same port (CI saw an agent and an operator share one).
_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports, none handed out before by this interpreter."""
    with contextlib.ExitStack() as stack:
        found: list[int] = []
        while len(found) < count:
            s = stack.enter_context(socket.socket())  # held open: the kernel cannot repeat it
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                found.append(port)
        _HANDED_OUT.update(found)
        return found


def _die_with_parent() -> None:
    """Child-side hook (Linux): SIGTERM this process when the process that started it dies."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def spawn(
    cmd: Sequence[str],
    log: Path,
    *,
    die_with_parent: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-lived process in its own session, output appended to `log`.

    `die_with_parent` (Linux) ties its life to this process: a test run killed by a timeout
    leaves no control plane behind. `cluster-up` leaves it False so the processes outlive the CLI.
    `env`: added to this process's environment.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    hook = _die_with_parent if die_with_parent and sys.platform == "linux" else None
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=hook,  # only prctl: safe between fork and exec
            env={**os.environ, **env} if env else None,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    return True


def terminate(pids: Sequence[int], *, grace: float = 10.0) -> None:
    """SIGTERM each process group, then SIGKILL what is still alive after `grace` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        _reap(pids)
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    for pid in pids:  # our own children: wait for SIGKILL to land so none is left unreaped
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
    _reap(pids)


def _reap(pids: Sequence[int]) -> None:
    for pid in pids:
        child = _CHILDREN.get(pid)
        if child is not None:
            if child.poll() is not None:
                del _CHILDREN[pid]
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
