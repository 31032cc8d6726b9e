"""Composition root of the gateway: build the parts, serve, shut down in order.

`serve(settings)` starts the Kubernetes watches (threads), the view, the balancer, the upstream
pool, the health prober, the idle sweeper, the usage shipper, the activator and its ModelDemand
writer (requests for sleeping deployments), the month's ledger and budget gate (`months`), with
`--console` the console and admin API (served for the paths the proxy does not serve), the data
port (uvicorn with
httptools, raw ASGI `proxy.Proxy`, the shared connection limits: `mlxfleet_common.wire.connlimits`)
and the metrics port (`/metrics`, `/healthz`; bounded heads, a head timeout and a connection cap
of its own), logs one JSON
line `gateway ready` with the bound ports, and runs until SIGINT/SIGTERM. Shutdown: stop taking
connections and drain requests in flight (up to `drain_s`), then the prober, the shipper (last
upload), the ModelDemand (deleted), the watches and the pool.
May import: everything in the gateway package, mlxfleet_common.wire (httpclient, connlimits,
serving), uvicorn, the standard library.
Called by: cli.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn

from mlxfleet_common.wire import connlimits, serving
from mlxfleet_common.wire import httpclient as upstream
from mlxfleet_gateway import (
    activator,
    demand,
    health,
    logline,
    metering,
    metrics,
    months,
    proxy,
    shipper,
    view,
    watch,
)
from mlxfleet_gateway import settings as settings_mod
from mlxfleet_gateway.core import balancer, budget, budgets, conversations, limits

log = logging.getLogger("mlxfleet_gateway")
METRICS_MAX_CONNECTIONS = 64  # scrapers and probes; more are closed unanswered


def configure_logging(level: str, *, access_log: bool = True) -> None:
    handler = logline.JsonHandler(sys.stdout)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if not access_log:
        logging.getLogger(metering.ACCESS).setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the console's API-server calls
    logging.getLogger("botocore").setLevel(logging.WARNING)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when the socket says
    # TCP; with Nagle on, each streamed chunk can wait ~40 ms for a delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _uvicorn(
    app: Any,
    *,
    drain_s: float,
    http: type[connlimits.LimitedHttpToolsProtocol] = connlimits.LimitedHttpToolsProtocol,
) -> serving.Server:
    """uvicorn on httptools with the connection limits of `http` (the class's defaults unless a
    `connlimits.protocol(...)` is given: the benchmarks run the gateway's stack as it ships)."""
    config = uvicorn.Config(
        app,
        http=http,
        ws="none",
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(max(1, drain_s)),
        timeout_keep_alive=30,
        server_header=False,
        date_header=False,
    )
    return serving.Server(config)


async def serve_metrics(
    sock: socket.socket, gauges: metrics.GatewayMetrics, cfg: settings_mod.Settings
) -> asyncio.AbstractServer:
    """`GET /metrics` and `/healthz` on their own port: a plain asyncio server (one request per
    connection), so the metrics port costs nothing between scrapes. A head is read up to
    `max_header_bytes` (the stream's limit) within `header_timeout_s`; beyond
    `METRICS_MAX_CONNECTIONS` open connections a new one is closed at once."""
    open_now = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now
        open_now += 1
        try:
            if open_now > METRICS_MAX_CONNECTIONS:
                return
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), cfg.header_timeout_s)
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            if path == b"/metrics":
                status, kind, body = b"200 OK", b"text/plain; version=0.0.4", gauges.exposition()
            elif path == b"/healthz":
                status, kind, body = b"200 OK", b"application/json", b'{"status":"ok"}'
            else:
                status, kind, body = b"404 Not Found", b"text/plain", b"not found"
            writer.write(
                b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (status, kind, len(body), body)
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            open_now -= 1
            writer.close()

    return await asyncio.start_server(handle, sock=sock, limit=cfg.max_header_bytes)


async def serve(
    cfg: settings_mod.Settings, *, on_ready: Callable[[int, int | None], None] | None = None
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    gauges = metrics.GatewayMetrics()
    balance = balancer.Balancer(eject_min_s=cfg.eject_min_s)
    state = view.View(balance, fleet_key=cfg.fleet_key)
    pool = upstream.Pool(connect_timeout_s=cfg.connect_timeout_s)
    secret = cfg.telemetry_secret_access_key
    usage = shipper.Shipper(
        shipper.ShipperConfig(
            node=f"gateway-{cfg.name}-{secrets.token_hex(3)}"[-200:],
            bucket=cfg.telemetry_bucket,
            prefix=cfg.telemetry_prefix,
            endpoint_url=cfg.telemetry_endpoint_url,
            region=cfg.telemetry_region,
            access_key_id=cfg.telemetry_access_key_id,
            secret_access_key=secret.get_secret_value() if secret is not None else None,
            interval_s=cfg.telemetry_interval_s,
        ),
        gauges,
    )
    api = watch.client_from(cfg.kubeconfig)
    demands = demand.Writer(api, namespace=cfg.namespace, gateway=cfg.name)
    holder = activator.Activator(
        state=state,
        demand=demands,
        gauges=gauges,
        limit=cfg.cold_start_queue,
        timeout_s=cfg.cold_start_timeout_s,
    )
    gate = budgets.Gate()
    ledger = months.MonthLedger(
        usage=usage,
        state=state,
        gate=gate,
        prefix=cfg.telemetry_prefix,
        peer_interval_s=cfg.telemetry_interval_s,
    )
    console = None
    if cfg.console:  # off the data path: the proxy hands it only the paths it does not serve
        from mlxfleet_gateway.console import app as console_app

        console = console_app.build(
            state=state,
            api_client=api,
            ledger=ledger,
            gate=gate,
            gauges=gauges,
            namespace=cfg.namespace,
            fleet_key=cfg.fleet_key,
        )
    app = proxy.Proxy(
        holder=holder,
        state=state,
        pool=pool,
        gauges=gauges,
        usage=usage,
        rate_limits=limits.Limits(share=cfg.peers),
        retry_budget=budget.RetryBudget(now=loop.time()),
        spend_gate=gate,
        mounted=console,
        stored=conversations.Conversations(
            max_turns=cfg.responses_max_stored,
            max_bytes=cfg.responses_max_bytes,
            ttl_s=cfg.responses_ttl_s,
        ),
        config=proxy.ProxyConfig(
            allow_anonymous=cfg.allow_anonymous,
            max_body_bytes=cfg.max_body_bytes,
            max_attempts=cfg.max_attempts,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            move_after_s=cfg.move_after_s,
            stream_cut_after_s=cfg.stream_cut_after_s,
            affinity=cfg.affinity,
        ),
    )
    gauges.watch_keys(app.key_facts)
    prober = health.Prober(
        pool=pool,
        balance=balance,
        gauges=gauges,
        on_dead=app.origins.on_dead,
        on_alive=app.origins.on_alive,
        last_heard=app.origins.last_heard,
        interval_s=cfg.probe_interval_s,
        timeout_s=cfg.probe_timeout_s,
    )

    def on_snapshot(kind: str, objects: dict[str, Any]) -> None:
        if kind in view.KINDS:
            state.replace(kind, objects)
        gauges.catalog.labels(kind).set(len(objects))
        if console is not None:
            console.p.observe(kind, objects)

    watches = watch.Watches(
        api,
        watch.sources(
            api,
            namespace=cfg.namespace,
            watch_namespaces=cfg.watch_namespaces,
            swapplans=cfg.console,
        ),
        on_snapshot,
        loop,
    )
    watches.start()
    data_sock = bind(*cfg.listen)
    metrics_sock = bind(*cfg.metrics_listen) if cfg.metrics_listen else None
    data_srv = _uvicorn(
        app,
        drain_s=cfg.drain_s,
        http=connlimits.protocol(
            max_header_bytes=cfg.max_header_bytes,
            header_timeout_s=cfg.header_timeout_s,
            body_timeout_s=cfg.body_timeout_s,
            max_connections=cfg.max_connections,
            head_with_body=True,  # a whole answer in one write (CPU per request)
        ),
    )
    tasks = [loop.create_task(data_srv.serve(sockets=[data_sock]))]
    metrics_srv = (
        await serve_metrics(metrics_sock, gauges, cfg) if metrics_sock is not None else None
    )
    prober.start()
    usage.start()
    demands.start()
    ledger.start()
    if console is not None:
        console.start()
    sweeper = loop.create_task(app.origins.sweep())
    while not data_srv.started and not tasks[0].done():  # noqa: ASYNC110 - uvicorn has no event
        await asyncio.sleep(0.02)
    port = data_sock.getsockname()[1]
    mport = metrics_sock.getsockname()[1] if metrics_sock is not None else None
    log.info(
        "gateway ready",
        extra={
            "port": port,
            "metrics_port": mport,
            "namespace": cfg.namespace,
            "anonymous": cfg.allow_anonymous,
            "console": cfg.console,
        },
    )
    if on_ready is not None:
        on_ready(port, mport)
    stopper = loop.create_task(stop.wait())
    await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    log.info("shutting down: draining requests in flight")
    data_srv.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    if metrics_srv is not None:
        metrics_srv.close()
    stopper.cancel()
    sweeper.cancel()
    await prober.stop()
    await usage.stop()
    await demands.aclose()
    await ledger.stop()  # after the shipper closed its interval: the month's last write
    if console is not None:
        await console.stop()
    watches.close()
    await pool.aclose()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    log.info("gateway stopped")
