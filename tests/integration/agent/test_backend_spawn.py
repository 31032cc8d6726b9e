"""How a backend is spawned (`host.platform.backend_spawn`): on Linux nothing runs in the forked
child (a `preexec_fn` in the threaded agent deadlocked before exec under libfaketime, and the
agent's loop with it), yet the backend still dies with the agent (PDEATHSIG through `setpriv`)
and still stops on SIGINT. Real processes, no mocks."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from mlxfleet_agent.host import platform

pytestmark = pytest.mark.skipif(platform.SETPRIV is None, reason="Linux with util-linux setpriv")

# a stand-in agent: spawns the child as backends.process does, prints its pid and the child's
# first line (its SIGINT handler), then dies: no fixed wait, so a slow child start on a busy box
# is not mistaken for a child that did not start (it failed so once in `make test`)
_PARENT = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from mlxfleet_agent.host import platform
    if sys.argv[1] == "ignore":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, lambda *_: None)  # the agent handles SIGINT
    async def main():
        argv, preexec = platform.backend_spawn([sys.executable, "-c", sys.argv[2]])
        print("preexec" if preexec else "none", flush=True)
        proc = await asyncio.create_subprocess_exec(
            *argv, start_new_session=True, preexec_fn=preexec, stdout=asyncio.subprocess.PIPE
        )
        print(proc.pid, flush=True)
        said = await asyncio.wait_for(proc.stdout.readline(), 25)  # the child is up
        print(said.decode().strip(), flush=True)
        os._exit(0)  # the agent dies
    asyncio.run(main())
    """
)
_CHILD = (
    "import signal, sys, time; print(signal.getsignal(signal.SIGINT), flush=True); time.sleep(60)"
)


def _run(mode: str) -> tuple[str, int, str]:
    out = subprocess.run(
        [sys.executable, "-c", _PARENT, mode, _CHILD],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split("\n")
    return out[0], int(out[1]), out[2]


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _kill(pid: int) -> None:
    """Whatever is left of the backend goes (most often nothing is)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).kill()


def test_nothing_runs_in_the_child_and_it_dies_with_the_agent() -> None:
    how, pid, sigint = _run("handled")
    try:
        assert how == "none"  # no preexec_fn: no Python between fork and exec
        assert "default_int_handler" in sigint  # SIGINT not inherited as ignored: it stops
        assert _gone(pid), "the backend outlived its agent"
    finally:
        _kill(pid)


def test_an_agent_that_ignores_sigint_still_gives_its_backend_a_default_sigint() -> None:
    how, pid, sigint = _run("ignore")
    try:
        assert how == "preexec"  # exec would keep SIG_IGN: only the preexec_fn resets it
        assert "default_int_handler" in sigint
        assert _gone(pid), "the backend outlived its agent"
    finally:
        _kill(pid)


def test_sigint_stops_a_backend_spawned_without_preexec() -> None:
    # as in the agent, which handles SIGINT: a suite started in the background (`make test &`)
    # inherits SIGINT ignored, which backend_spawn answers with its preexec_fn (the test above)
    handled = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        argv, preexec = platform.backend_spawn(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
        )
        assert preexec is None
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, handled)
    with proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "up"
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) != 0  # KeyboardInterrupt: it stopped
        finally:
            if proc.poll() is None:
                proc.kill()
