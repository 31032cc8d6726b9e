"""One backend process: spawn, watch, stop. No policy and no engine specifics here.

A backend runs its engine's launch (`engines.registry.launch`: argv, extra environment, stop
signal) in its own process group (so a terminal's Ctrl+C reaches the agent only, which stops
backends in order) and, on Linux, dies with the agent (PR_SET_PDEATHSIG). Stop is the engine's
stop signal, then SIGKILL after a grace period. Output goes to `<state-dir>/logs/<label>.log`
(opened for appending, so `logrotate` can truncate it under the running backend); its tail
becomes the slot's lastError when the backend fails.
May import: host.platform, engines.plugin and the standard library. Called by: backends.launcher,
slots.
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

from mlxfleet_agent.engines import plugin
from mlxfleet_agent.host import platform

log = logging.getLogger(__name__)


# The agent's own credentials in its environment (the telemetry upload's, MLXFLEET_TELEMETRY_* or
# AWS_*): no backend needs them, and a `command` engine's program must not be able to read them.
# A name a launch sets explicitly (an allowed engine variable) still reaches it. The Hugging Face
# token stays reachable as join sets it up (HF_TOKEN_PATH): engines that download use it.
AGENT_SECRET_PREFIXES = ("MLXFLEET_TELEMETRY_", "AWS_")


def backend_env(launch_env: dict[str, str], parent: dict[str, str]) -> dict[str, str]:
    """A backend's environment: the agent's, less its own credentials, plus the launch's."""
    inherited = {
        name: value for name, value in parent.items() if not name.startswith(AGENT_SECRET_PREFIXES)
    }
    return {**inherited, "PYTHONUNBUFFERED": "1", **launch_env}


class BackendFailed(RuntimeError):
    """The backend could not start or become ready; the message carries the reason."""


def free_port() -> int:
    """An ephemeral loopback port that was free a moment ago (a bind race restarts the backend)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exit_text(returncode: int | None) -> str:
    """A return code in words: `exit 0`, `exit 3`, `signal SIGABRT` (negative codes)."""
    if returncode is None:
        return "running"
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


class Backend:
    """A started (or failed) backend process on a loopback port."""

    def __init__(
        self,
        recipe: Callable[[int], plugin.Launch],
        *,
        label: str,
        log_dir: Path,
    ) -> None:
        self.label = label
        self.port = free_port()
        self.launch = recipe(self.port)
        self.log_path = log_dir / f"{label}.log"
        self.stop_signal = self.launch.stop_signal
        self.proc: asyncio.subprocess.Process | None = None
        self.stopping = False
        self._stop_logged = False

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
        env = backend_env(dict(self.launch.env), dict(os.environ))
        self.log_path.write_bytes(b"")  # a new start, a new log
        argv, preexec = platform.backend_spawn(self.launch.argv)
        with self.log_path.open("ab") as out:  # appending: `logrotate` may truncate it
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec,
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
        """The stop signal to the process group, SIGKILL after `grace_s`; idempotent.

        Logged at info when the backend ended after the agent's signal (whatever its return
        code: an engine may abort on its way out, as mlx_lm did before `mlxlm.ENTRY`), at
        warning when it had to be killed or had already exited on its own."""
        self.stopping = True
        proc = self.proc
        if proc is None:
            return
        sent: signal.Signals | None = None
        if proc.returncode is None:
            sent = self.stop_signal
            self._signal_group(sent)
            try:
                await asyncio.wait_for(proc.wait(), timeout=grace_s)
            except TimeoutError:
                log.warning(
                    f"backend ignored {self.stop_signal.name}, killing",
                    extra={"backend": self.label},
                )
                sent = signal.SIGKILL
                self._signal_group(sent)
                await proc.wait()
        self._signal_group(signal.SIGKILL)  # stragglers in its group, if any
        if sent is None and self._stop_logged:
            return  # stopped by an earlier call, logged then
        self._stop_logged = True
        code = proc.returncode
        extra = {
            "backend": self.label,
            "pid": proc.pid,
            "returncode": code,
            "exit": exit_text(code),
        }
        if sent is None:
            log.warning("backend had exited on its own before the agent stopped it", extra=extra)
        else:
            log.log(
                logging.WARNING if sent is signal.SIGKILL else logging.INFO,
                f"backend stopped by the agent ({sent.name})",
                extra={**extra, "signal": sent.name},
            )

    def kill(self, why: str) -> None:
        """End the process now for `why` (a line in its log, so the slot's error says it); not a
        stop the agent asked for: its exit is a failure, watched as any other."""
        with contextlib.suppress(OSError), self.log_path.open("a") as out:
            out.write(f"mlxfleet-agent: {why}\n")
        log.warning("backend killed", extra={"backend": self.label, "why": why})
        if self.proc is not None and self.proc.returncode is None:
            self._signal_group(signal.SIGKILL)

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
