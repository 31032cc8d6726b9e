"""`serve`: bind both ports, run the control API and the data plane on two uvicorn servers in
one event loop and, on SIGINT/SIGTERM, shut down in order: stop accepting data-plane requests and
drain the in-flight ones, stop the control API, stop every backend (the lifespan's exit).

Bind and TLS failures become `settings.SettingsError`s naming the flag, the value and the
remedy. Both ports get the connection limits of `connlimits` (with their own error bodies).
May import: uvicorn, the standard library, contract, mlxfleet_common.wire (connlimits,
serving), runtime (compose, settings).
Called by: cli (`serve`), tests.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import ssl
from collections.abc import Callable
from typing import Any

import uvicorn

from mlxfleet_agent import contract
from mlxfleet_agent.runtime import compose
from mlxfleet_agent.runtime import settings as settings_mod
from mlxfleet_common.wire import connlimits, serving

KEEP_ALIVE_S = 30  # an idle client connection is kept this long (the operator keeps it 20 s)

log = logging.getLogger("mlxfleet_agent")


def _bind(host: str, port: int, *, port_flag: str) -> socket.socket:
    """A listening socket; failures become SettingsError naming the flag, value and remedy."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
    # socket's proto says TCP; with Nagle on, each streamed chunk waits ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise settings_mod.SettingsError(_bind_error(exc, host, port, port_flag)) from None
    sock.setblocking(False)
    return sock


def _bind_error(exc: OSError, host: str, port: int, port_flag: str) -> str:
    local = "127.0.0.1, 0.0.0.0 (every interface) or an address of this machine"
    if isinstance(exc, socket.gaierror):
        return f"--bind {host}: not an IP address or known host name ({exc.strerror}); use {local}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--bind {host}: not an address of this machine; use {local}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{port_flag} {port}: {host}:{port} is already in use by another process; stop it, "
            "or choose another port (0 picks a free one)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"{port_flag} {port}: permission denied on {host}:{port} (ports below 1024 need "
            "privileges); choose a port above 1023"
        )
    return f"--bind {host} {port_flag} {port}: cannot listen ({settings_mod.reason(exc)})"


def _server(
    app: Any,
    cfg: settings_mod.Settings,
    *,
    tls: bool,
    drain_s: float,
    max_connections: int,
    error_body: connlimits.ErrorBody,
) -> serving.Server:
    kwargs: dict[str, Any] = {}
    if tls:
        kwargs = {"ssl_certfile": str(cfg.tls_cert), "ssl_keyfile": str(cfg.tls_key)}
    config = uvicorn.Config(
        app,
        http=connlimits.protocol(
            max_header_bytes=cfg.max_header_bytes,
            header_timeout_s=cfg.header_timeout_s,
            body_timeout_s=cfg.body_timeout_s,
            max_connections=max_connections,
            error_body=error_body,
            head_with_body=True,  # a whole answer in one socket write (CPU per request)
        ),
        ws="none",
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(max(1, drain_s)),
        timeout_keep_alive=KEEP_ALIVE_S,
        server_header=False,
        # the agent reads no client address (keys authenticate; its callers are the gateway and
        # the operator): uvicorn's X-Forwarded-For middleware around every request bought nothing
        proxy_headers=False,
        **kwargs,
    )
    return serving.Server(config)


CONTROL_FIELDS = {
    connlimits.Refusal.AMBIGUOUS_CREDENTIALS: "authorization",
    connlimits.Refusal.BODY_TIMEOUT: "body",
}


def _control_error(refusal: connlimits.Refusal, message: str) -> bytes:
    field = CONTROL_FIELDS.get(refusal, "headers")
    body = contract.ErrorBody(error=contract.ErrorDetail(field=field, message=message))
    return body.model_dump_json(exclude_none=True).encode()


async def serve(
    cfg: settings_mod.Settings, *, on_ready: Callable[[int, int], None] | None = None
) -> None:
    """Run the agent until SIGINT/SIGTERM; then drain, stop backends and return."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    control_sock = _bind(cfg.bind, cfg.control_port, port_flag="--control-port")
    try:
        data_sock = _bind(cfg.bind, cfg.data_port, port_flag="--data-port")
    except settings_mod.SettingsError:
        control_sock.close()
        raise
    async with compose.lifespan(cfg, data_port=data_sock.getsockname()[1]) as rt:
        control_srv = _server(
            rt.control_app,
            cfg,
            tls=cfg.tls_cert is not None,
            drain_s=5.0,
            max_connections=cfg.control_max_connections,
            error_body=_control_error,
        )
        data_srv = _server(
            rt.data_app,
            cfg,
            tls=False,
            drain_s=cfg.shutdown_drain_s,
            max_connections=cfg.max_connections,
            error_body=connlimits.openai_body,
        )
        data_task = loop.create_task(data_srv.serve(sockets=[data_sock]))
        control_task = loop.create_task(control_srv.serve(sockets=[control_sock]))
        while not (control_srv.started and data_srv.started):
            if data_task.done() or control_task.done():
                break
            await asyncio.sleep(0.02)
        ports = (control_sock.getsockname()[1], data_sock.getsockname()[1])
        log.info(
            "agent ready",
            extra={
                "control_port": ports[0],
                "data_port": ports[1],
                "bind": cfg.bind,
                "tls": cfg.tls_cert is not None,
                "state_dir": str(cfg.state_dir),
            },
        )
        if on_ready is not None:
            on_ready(*ports)
        stopper = loop.create_task(stop.wait())
        await asyncio.wait({stopper, data_task, control_task}, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting down: draining the data plane")
        rt.registry.begin_shutdown()
        data_srv.should_exit = True
        await data_task
        control_srv.should_exit = True
        await control_task
        stopper.cancel()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    log.info("agent stopped")


def check_tls(cfg: settings_mod.Settings) -> None:
    """Fail early (before binding) when the TLS pair cannot be loaded; SettingsError names the
    flag, the file and what to do."""
    if cfg.tls_cert is None or cfg.tls_key is None:
        return
    off = "or leave --tls-cert and --tls-key out to serve the control API over plain HTTP"
    for flag, path in (("--tls-cert", cfg.tls_cert), ("--tls-key", cfg.tls_key)):
        if not path.is_file():
            why = "no such file" if not path.exists() else "not a regular file"
            raise settings_mod.SettingsError(f"{flag} {path}: {why}; give a PEM file, {off}")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(str(cfg.tls_cert), str(cfg.tls_key))
    except ssl.SSLError as exc:
        raise settings_mod.SettingsError(
            f"--tls-cert {cfg.tls_cert} / --tls-key {cfg.tls_key}: not a PEM certificate "
            f"(chain) and its matching private key ({exc.reason or exc}); {off}"
        ) from None
    except OSError as exc:
        raise settings_mod.SettingsError(
            f"--tls-cert {cfg.tls_cert} / --tls-key {cfg.tls_key}: cannot read "
            f"({settings_mod.reason(exc)}); {off}"
        ) from None
