"""One backend process: spawn, watch, stop. No policy and no engine specifics here.

A backend runs its command (see `mlxlm.command`) in its own process group (so a terminal's
Ctrl+C reaches the agent only, which stops backends in order) and, on Linux, dies with the agent
(PR_SET_PDEATHSIG). Stop is the engine's stop signal, then SIGKILL after a grace period. Output
goes to `<state-dir>/logs/<label>.log`; its tail becomes the slot's lastError when the backend
fails.
May import: host.platform and the standard library. Called by: backends.launcher, slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from mlxfleet_agent.host import platform

log = logging.getLogger(__name__)


class BackendFailed(RuntimeError):
    """The backend could not start or become ready; the message carries the reason."""


def free_port() -> int:
    """An ephemeral loopback port that was free a moment ago (a bind race restarts the backend)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Backend:
    """A started (or failed) backend process on a loopback port."""

    def __init__(
        self,
        command: Callable[[int], list[str]],
        *,
        label: str,
        log_dir: Path,
        stop_signal: signal.Signals = signal.SIGINT,
    ) -> None:
        self.command = command
        self.label = label
        self.port = free_port()
        self.log_path = log_dir / f"{label}.log"
        self.stop_signal = stop_signal
        self.proc: asyncio.subprocess.Process | None = None
        self.stopping = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        """Spawn the process (from the event loop's thread: PDEATHSIG is per forking thread)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command(self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=platform.backend_preexec,
                env=env,
            )
        log.info(
            "backend started",
            extra={"backend": self.label, "pid": self.proc.pid, "port": self.port},
        )

    async def wait_exit(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def stop(self, *, grace_s: float) -> None:
        """The stop signal to the process group, SIGKILL after `grace_s`; idempotent."""
        self.stopping = True
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            self._signal_group(self.stop_signal)
            try:
                await asyncio.wait_for(proc.wait(), timeout=grace_s)
            except TimeoutError:
                log.warning(
                    f"backend ignored {self.stop_signal.name}, killing",
                    extra={"backend": self.label},
                )
                self._signal_group(signal.SIGKILL)
                await proc.wait()
        self._signal_group(signal.SIGKILL)  # stragglers in its group, if any
        log.info(
            "backend stopped",
            extra={"backend": self.label, "pid": proc.pid, "returncode": proc.returncode},
        )

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def log_tail(self, limit: int = 600) -> str:
        try:
            data = self.log_path.read_bytes()[-4096:].decode(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in data.splitlines() if ln.strip()]
        return " | ".join(lines[-6:])[-limit:]
