"""Ships closed telemetry intervals to an S3-compatible bucket, buffered on disk.

Every `interval_seconds` (60 by default) the open interval of `telemetry.Telemetry` is closed and
written atomically to `<spool_dir>/queue/`; queued intervals are uploaded oldest first, each to
its own idempotent key (`contract.telemetry_key`: node + interval start), so a retry overwrites
and never double counts. While the store is unreachable the queue grows up to `max_buffered`
intervals, then the oldest are dropped and counted (`dropped_intervals` in the next interval).
The open interval is checkpointed every tick and on stop, so an agent restart loses nothing.
Without a bucket nothing is written to disk at all (intervals close into the metrics only).
A checkpoint belongs to the node name it was written for: a restart under the same name in the
same interval merges it; otherwise it is queued, closed, under its own name (after a nodeName
change the old name's last partial interval still ships, and no count moves to the new name).
May import: boto3/botocore, the standard library, contract, telemetry, hoststats.
Called by: the agent's app lifespan (start/stop), tests.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlxfleet_agent import contract, hoststats, telemetry

log = logging.getLogger("mlxfleet_agent.shipper")
ENV_PREFIX = "MLXFLEET_TELEMETRY_"


@dataclass(frozen=True, slots=True)
class ShipperConfig:
    """Where and how often to ship. `bucket=None` keeps intervals on disk only."""

    spool_dir: Path
    bucket: str | None = None
    prefix: str = "mlxfleet-telemetry"
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    interval_seconds: float = 60.0
    max_buffered: int = 10_080  # one week of 60 s intervals
    tick_seconds: float | None = None  # host sampling / checkpoint period; default interval / 12

    @classmethod
    def from_env(
        cls, *, spool_dir: Path, environ: Mapping[str, str] | None = None
    ) -> ShipperConfig:
        """`MLXFLEET_TELEMETRY_{BUCKET,PREFIX,ENDPOINT_URL,REGION,ACCESS_KEY_ID,SECRET_ACCESS_KEY,
        INTERVAL_SECONDS,MAX_BUFFERED}`; credentials fall back to boto3's own chain (AWS_*)."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            return env.get(ENV_PREFIX + name) or None

        return cls(
            spool_dir=spool_dir,
            bucket=get("BUCKET"),
            prefix=get("PREFIX") or "mlxfleet-telemetry",
            endpoint_url=get("ENDPOINT_URL"),
            region=get("REGION"),
            access_key_id=get("ACCESS_KEY_ID"),
            secret_access_key=get("SECRET_ACCESS_KEY"),
            interval_seconds=float(get("INTERVAL_SECONDS") or 60.0),
            max_buffered=int(get("MAX_BUFFERED") or 10_080),
        )


def node_name(explicit: str | None = None) -> str:
    """The node's name in object keys: explicit, else the host name's first label (sanitised)."""
    raw = explicit or _host_name() or "node"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", raw).strip("-.") or "node"
    return name[:253]


def _host_name() -> str:
    return socket.gethostname().split(".")[0]


class Uploader(Protocol):
    def put(self, key: str, body: bytes) -> None: ...


class S3Uploader:
    """boto3 `put_object` with short timeouts, so an unreachable store only delays the queue."""

    def __init__(self, config: ShipperConfig) -> None:
        import boto3
        from botocore.config import Config

        if config.bucket is None:
            raise ValueError("S3Uploader needs a bucket")
        self._bucket = config.bucket
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region or "us-east-1",
            aws_access_key_id=config.access_key_id,
            aws_secret_access_key=config.secret_access_key,
            config=Config(
                connect_timeout=3,
                read_timeout=10,
                retries={"max_attempts": 2, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def put(self, key: str, body: bytes) -> None:
        self._client.put_object(
            Bucket=self._bucket, Key=key, Body=body, ContentType="application/x-ndjson"
        )


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Spool:
    """The on-disk queue of closed intervals (one file each, named by start and node) and the
    checkpoint. Folders are created on the first write, never just by looking."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.queue_dir = root / "queue"
        self.checkpoint_path = root / "open-interval.json"

    @staticmethod
    def _name(interval: contract.TelemetryInterval) -> str:
        start = round(interval.interval_start.timestamp() * 1000)
        return f"{start:016d}-{interval.node}.json"  # two names in one window: two files

    def push(self, interval: contract.TelemetryInterval) -> None:
        self.queue_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.queue_dir / self._name(interval), interval.model_dump_json().encode())

    def contains(self, interval: contract.TelemetryInterval) -> bool:
        return (self.queue_dir / self._name(interval)).exists()

    def pending(self) -> list[Path]:
        return sorted(self.queue_dir.glob("*.json"))

    def trim(self, limit: int) -> int:
        """Drop the oldest files beyond `limit`; return how many were dropped."""
        files = self.pending()
        excess = files[: max(0, len(files) - limit)]
        for path in excess:
            path.unlink(missing_ok=True)
        return len(excess)

    def save_checkpoint(self, interval: contract.TelemetryInterval) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.checkpoint_path, interval.model_dump_json().encode())

    def load_checkpoint(self) -> contract.TelemetryInterval | None:
        try:
            return contract.TelemetryInterval.model_validate_json(self.checkpoint_path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("discarding unreadable telemetry checkpoint %s", self.checkpoint_path)
            return None

    def clear_checkpoint(self) -> None:
        self.checkpoint_path.unlink(missing_ok=True)


class Shipper:
    """Closes intervals on time, keeps the disk queue, uploads in order. One thread."""

    def __init__(
        self,
        tel: telemetry.Telemetry,
        config: ShipperConfig,
        *,
        uploader: Uploader | None = None,
        power: hoststats.PowerMeter | None = None,
    ) -> None:
        if tel.interval_seconds != config.interval_seconds:
            raise ValueError("Telemetry and ShipperConfig disagree on interval_seconds")
        self.telemetry = tel
        self.config = config
        self.spool = Spool(config.spool_dir)
        self._uploader = uploader
        if uploader is None and config.bucket is not None:
            self._uploader = S3Uploader(config)
        self._power = power
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self.uploaded_keys: list[str] = []  # this process's uploads, in order (diagnostics)

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def shipping(self) -> bool:
        """A bucket is configured: intervals are queued on disk and uploaded."""
        return self._uploader is not None

    def recover(self) -> None:
        """Take back the checkpoint of a previous run: merged when it is this node's open
        interval, else queued closed under the node name it was written for. Without a bucket
        it stays where it is (it was written while one was configured) and nothing is read."""
        if not self.shipping:
            if self.spool.checkpoint_path.exists() or self.spool.pending():
                log.warning(
                    "no telemetry bucket: intervals of an earlier run stay in %s until one is "
                    "configured (delete the folder to discard them)",
                    self.spool.root,
                )
            return
        saved = self.spool.load_checkpoint()
        if saved is None:
            return
        if self.spool.contains(saved):
            self.spool.clear_checkpoint()  # closed and queued just before the previous stop
            return
        closed = self.telemetry.restore(saved)
        if closed is not None:
            if closed.node != self.telemetry.node:
                log.warning(
                    "telemetry checkpoint of node %s (interval %s) ships under that name; "
                    "this agent now ships as %s",
                    closed.node,
                    closed.interval_start.isoformat(),
                    self.telemetry.node,
                )
            self._enqueue(closed)
            self.spool.clear_checkpoint()

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._run, name="telemetry-shipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, persist the open interval, try one last upload."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self.tick(upload=False)
        self.flush()

    # ---- one step ----------------------------------------------------------------------------

    def tick(self, *, upload: bool = True) -> None:
        """Sample the host, close the interval when due, checkpoint, upload what is queued."""
        with contextlib.suppress(Exception):
            self.telemetry.add_host_sample(hoststats.sample(self._power))
        closed = self.telemetry.roll()
        if closed is not None:
            self._enqueue(closed)
        if not self.shipping:
            return  # nothing to ship: nothing is kept on disk
        if upload:
            self.flush()
        self._trim()  # only what the store could not take counts against the bound
        self.spool.save_checkpoint(self.telemetry.checkpoint())

    def flush(self) -> int:
        """Upload queued intervals oldest first; stop at the first failure. Returns uploads."""
        m = self.telemetry.metrics
        if self._uploader is None:
            m.buffered.set(0)
            return 0
        done = 0
        for path in self.spool.pending():
            try:
                interval = contract.TelemetryInterval.model_validate_json(path.read_bytes())
            except ValueError:
                log.error("dropping unreadable queued interval %s", path.name)
                path.unlink(missing_ok=True)
                continue
            key = contract.telemetry_key(self.config.prefix, interval.node, interval.interval_start)
            body = interval.model_dump_json().encode() + b"\n"
            try:
                self._uploader.put(key, body)
            except Exception as exc:  # any transport or S3 error: keep it queued, retry next tick
                m.intervals.labels(result="upload_failed").inc()
                if not self._failing:
                    log.warning("telemetry store unreachable, buffering on disk: %s", exc)
                self._failing = True
                break
            path.unlink(missing_ok=True)
            self.uploaded_keys.append(key)
            m.intervals.labels(result="uploaded").inc()
            log.info("shipped %s", key)
            done += 1
        else:
            if self._failing:
                log.warning("telemetry store reachable again")
            self._failing = False
        m.buffered.set(len(self.spool.pending()))
        return done

    # ---- internals ---------------------------------------------------------------------------

    def _enqueue(self, interval: contract.TelemetryInterval) -> None:
        self.telemetry.metrics.intervals.labels(result="closed").inc()
        if self._uploader is None:
            return  # no bucket configured: metrics only, nothing accumulates on disk
        self.spool.push(interval)

    def _trim(self) -> None:
        dropped = self.spool.trim(self.config.max_buffered)
        if dropped:
            log.warning("telemetry buffer full: dropped %d oldest intervals", dropped)
            self.telemetry.metrics.intervals.labels(result="dropped").inc(dropped)
            self.telemetry.note_dropped(dropped)

    def _tick_seconds(self) -> float:
        return self.config.tick_seconds or max(0.05, min(5.0, self.config.interval_seconds / 12))

    def _run(self) -> None:
        while not self._stop.wait(self._tick_seconds()):
            try:
                self.tick()
            except Exception:
                log.exception("telemetry tick failed")


def build(
    *,
    state_dir: Path,
    node: str | None = None,
    interval_seconds: float = 60.0,
    idle_watts: float | None = None,
    busy_watts: float | None = None,
    bucket: str | None = None,
    prefix: str | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[telemetry.Telemetry, Shipper]:
    """The agent's telemetry and its shipper: explicit settings win over MLXFLEET_TELEMETRY_*.

    Call `shipper.start()` once the runtime is up and `shipper.stop()` (blocking, run it in a
    thread from async code) after the data plane drained. Spool: `<state_dir>/telemetry/`.
    """
    env = ShipperConfig.from_env(spool_dir=state_dir / "telemetry", environ=environ)
    cfg = ShipperConfig(
        spool_dir=env.spool_dir,
        bucket=bucket or env.bucket,
        prefix=prefix or env.prefix,
        endpoint_url=endpoint_url or env.endpoint_url,
        region=region or env.region,
        access_key_id=env.access_key_id,
        secret_access_key=env.secret_access_key,
        interval_seconds=interval_seconds,
        max_buffered=env.max_buffered,
    )
    if node is None and cfg.bucket is not None:
        log.warning(
            "telemetry ships under the host name %r: set nodeName in the agent config to this "
            "Mac's InferenceNode name, which the reports match telemetry by",
            node_name(None),
        )
    tel = telemetry.Telemetry(
        node=node_name(node),
        interval_seconds=interval_seconds,
        idle_watts=idle_watts,
        busy_watts=busy_watts,
    )
    return tel, Shipper(tel, cfg, power=hoststats.PowerMeter())
