"""One mlx_lm.server backend process: start, warm up, watch, stop. No policy here.

A backend runs `python -m mlx_lm server --model DIR --host 127.0.0.1 --port P` in its own process
group (so a terminal's Ctrl+C reaches the agent only, which stops backends in order) and, on
Linux, dies with the agent (PR_SET_PDEATHSIG). Stop is SIGINT (mlx_lm ignores SIGTERM), then
SIGKILL after a grace period. Output goes to `<state-dir>/logs/<label>.log`; its tail becomes the
slot's lastError when the backend fails.
May import: contract, platform, ranks, readiness, httpx and the standard library.
Called by: slots, swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from mlxfleet_agent import contract, platform, ranks, readiness

log = logging.getLogger(__name__)


class BackendFailed(RuntimeError):
    """The backend could not start or become ready; the message carries the reason."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What a backend process is started with (derived from a SlotSpec and a local model dir)."""

    model_dir: Path
    options: contract.ServerOptions
    max_concurrency: int
    python: str
    shard: contract.RankSpec | None = None  # one rank of a sharded group (see ranks)


def command(spec: LaunchSpec, *, port: int) -> list[str]:
    """The backend's command line (pure; unit-tested)."""
    opts = spec.options
    decode = opts.decode_concurrency or spec.max_concurrency
    prompt = opts.prompt_concurrency or min(decode, 8)
    argv = [
        spec.python,
        "-m",
        "mlx_lm",
        "server",
        "--model",
        str(spec.model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        "--decode-concurrency",
        str(decode),
        "--prompt-concurrency",
        str(prompt),
    ]
    if opts.max_tokens is not None:
        argv += ["--max-tokens", str(opts.max_tokens)]
    if opts.chat_template_args:
        argv += ["--chat-template-args", json.dumps(opts.chat_template_args)]
    if opts.kv_bits is not None:
        argv += ["--kv-bits", str(opts.kv_bits)]
    if spec.shard is not None:
        argv += ranks.arguments(spec.shard)
    return argv


def free_port() -> int:
    """An ephemeral loopback port that was free a moment ago (a bind race restarts the backend)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Backend:
    """A started (or failed) mlx_lm.server process."""

    def __init__(self, spec: LaunchSpec, *, label: str, log_dir: Path) -> None:
        self.spec = spec
        self.label = label
        self.port = free_port()
        self.log_path = log_dir / f"{label}.log"
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
        if self.spec.shard is not None:
            env.update(ranks.environment(self.spec.shard, run_dir=self.log_path.parent / "ranks"))
        with self.log_path.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *command(self.spec, port=self.port),
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

    async def start_ready(self, client: httpx.AsyncClient, *, timeout_s: float) -> None:
        """Start and warm up; on failure the process is stopped and BackendFailed raised."""
        try:
            await self.start()
            took = await readiness.warm_up(
                client, self.base_url, alive=self.alive, timeout_s=timeout_s
            )
        except (readiness.NotReady, OSError) as exc:
            await self.stop(grace_s=2.0)
            raise BackendFailed(f"{exc}; log: {self.log_tail()}") from exc
        except BaseException:
            await self.stop(grace_s=2.0)
            raise
        log.info("backend ready", extra={"backend": self.label, "warmup_s": round(took.seconds, 3)})

    async def wait_exit(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def stop(self, *, grace_s: float) -> None:
        """SIGINT the process group, SIGKILL after `grace_s`; idempotent."""
        self.stopping = True
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            self._signal_group(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), timeout=grace_s)
            except TimeoutError:
                log.warning("backend ignored SIGINT, killing", extra={"backend": self.label})
                self._signal_group(signal.SIGKILL)
                await proc.wait()
        self._signal_group(signal.SIGKILL)  # stragglers in its group, if any
        log.info(
            "backend stopped",
            extra={"backend": self.label, "pid": proc.pid, "returncode": proc.returncode},
        )

    def kill_now(self) -> None:
        """Synchronous last resort (interpreter exit): SIGKILL the group."""
        self.stopping = True
        if self.proc is not None:
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


def default_python() -> str:
    return sys.executable
