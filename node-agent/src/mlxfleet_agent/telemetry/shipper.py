"""Ships closed telemetry intervals to an S3-compatible bucket, buffered on disk: the agent's
side of the one telemetry shipper (mlxfleet_common.telemetry.shipper: the queue bound, the
upload order, the idempotent keys), driven by a thread, over the disk queue (`spool`).

Every `interval_seconds` (60 by default) the open interval of `recorder.Telemetry` is closed and
written atomically to `<spool_dir>/queue/`; queued intervals are uploaded oldest first, each to
its own idempotent key (`contract.telemetry_key`: node + interval start), so a retry overwrites
and never double counts. While the store is unreachable the queue grows up to `max_buffered`
intervals, then the oldest are dropped and counted (`dropped_intervals` in the next interval).
The open interval is checkpointed every tick and on stop, so an agent restart loses nothing.
Without a bucket nothing is written to disk at all (intervals close into the metrics only).
The configuration (`ShipperConfig`) comes from the agent's settings (runtime.compose).
A checkpoint belongs to the node name it was written for: a restart under the same name in the
same interval merges it; otherwise it is queued, closed, under its own name (after a nodeName
change the old name's last partial interval still ships, and no count moves to the new name).
Each tick also samples the host (memory, pressure, heat: `hoststats.sample`), so the heat
meter's commands run in this thread, never on the event loop.
May import: the standard library, contract, mlxfleet_common (s3client, telemetry.shipper),
telemetry (recorder, hoststats, heat, spool). Called by: runtime (build, start, stop), tests.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mlxfleet_agent import contract
from mlxfleet_agent.telemetry import heat, hoststats, recorder, spool
from mlxfleet_common import s3client
from mlxfleet_common.telemetry import shipper as common

log = logging.getLogger("mlxfleet_agent.shipper")
DEFAULT_PREFIX = "mlxfleet-telemetry"


@dataclass(frozen=True, slots=True)
class ShipperConfig:
    """Where and how often to ship. `bucket=None` keeps intervals on disk only."""

    spool_dir: Path
    bucket: str | None = None
    prefix: str = DEFAULT_PREFIX
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    interval_seconds: float = 60.0
    max_buffered: int = 10_080  # one week of 60 s intervals
    tick_seconds: float | None = None  # host sampling / checkpoint period; default interval / 12


def node_name(explicit: str | None = None) -> str:
    """The node's name in object keys: explicit, else the host name's first label (sanitised)."""
    raw = explicit or _host_name() or "node"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", raw).strip("-.") or "node"
    return name[:253]


def _host_name() -> str:
    return socket.gethostname().split(".")[0]


class Uploader(Protocol):
    def put(self, key: str, body: bytes) -> None: ...


class Shipper:
    """Closes intervals on time, checkpoints the open one, samples the host: one thread driving
    the shared shipper (mlxfleet_common.telemetry.shipper) over the disk queue (`spool`)."""

    def __init__(
        self,
        tel: recorder.Telemetry,
        config: ShipperConfig,
        *,
        uploader: Uploader | None = None,
        heat_meter: heat.HeatMeter | None = None,
        psi_file: Path | None = hoststats.PSI_FILE,
    ) -> None:
        if tel.interval_seconds != config.interval_seconds:
            raise ValueError("Telemetry and ShipperConfig disagree on interval_seconds")
        self.telemetry = tel
        self.config = config
        self.spool = spool.Spool(config.spool_dir)
        if uploader is None and config.bucket is not None:
            # short timeouts, so an unreachable store only delays the queue
            uploader = s3client.Bucket(
                config.bucket,
                profile=s3client.TELEMETRY,
                endpoint_url=config.endpoint_url,
                region=config.region,
                access_key_id=config.access_key_id,
                secret_access_key=config.secret_access_key,
            )
        intervals = tel.metrics.intervals
        codec = contract.IntervalCodec(config.prefix)
        self._ship = common.Shipper(
            self.spool,
            uploader,
            codec=codec,
            key=codec.key,
            max_buffered=config.max_buffered,
            count=lambda result, n: intervals.labels(result=result).inc(n),
            log=log,
        )
        self._heat = heat_meter
        self._psi_file = psi_file
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def shipping(self) -> bool:
        """A bucket is configured: intervals are queued on disk and uploaded."""
        return self._ship.shipping

    @property
    def uploaded_keys(self) -> list[str]:
        """This process's latest uploads, in order (diagnostics)."""
        return list(self._ship.uploaded)

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
        self._sample()
        closed = self.telemetry.roll()
        if closed is not None:
            self._enqueue(closed)
        if not self.shipping:
            return  # nothing to ship: nothing is kept on disk
        if upload:
            self.flush()
        dropped = self._ship.trim()  # only what the store could not take counts against the bound
        if dropped:
            self.telemetry.note_dropped(dropped)
        self.spool.save_checkpoint(self.telemetry.checkpoint())

    def flush(self) -> int:
        """Upload queued intervals oldest first; stop at the first failure. Returns uploads."""
        done = self._ship.flush()
        self.telemetry.metrics.buffered.set(len(self.spool) if self.shipping else 0)
        return done

    # ---- internals ---------------------------------------------------------------------------

    def _enqueue(self, interval: contract.TelemetryInterval) -> None:
        self.telemetry.metrics.intervals.labels(result="closed").inc()
        self._ship.enqueue(interval)  # no bucket configured: metrics only, nothing on disk

    def _tick_seconds(self) -> float:
        return self.config.tick_seconds or max(0.05, min(5.0, self.config.interval_seconds / 12))

    def _sample(self) -> None:
        """One host sample now (memory, pressure, heat): the first, taken as the thread starts,
        so GET /v1/state reports heat within a second of start rather than a tick later."""
        with contextlib.suppress(Exception):
            self.telemetry.add_host_sample(hoststats.sample(self._heat, self._psi_file))

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(self._tick_seconds()):
            try:
                self.tick()
            except Exception:
                log.exception("telemetry tick failed")


def build(
    config: ShipperConfig,
    *,
    node: str | None = None,
    idle_watts: float | None = None,
    busy_watts: float | None = None,
    heat_meter: heat.HeatMeter | None = None,
    psi_file: Path | None = hoststats.PSI_FILE,
) -> tuple[recorder.Telemetry, Shipper]:
    """The agent's telemetry and its shipper (`config.spool_dir`, usually `<state-dir>/telemetry`).

    Call `shipper.start()` once the runtime is up and `shipper.stop()` (blocking, run it in a
    thread from async code) after the data plane drained.
    """
    if node is None and config.bucket is not None:
        log.warning(
            "telemetry ships under the host name %r: set nodeName in the agent config to this "
            "Mac's InferenceNode name, which the reports match telemetry by",
            node_name(None),
        )
    tel = recorder.Telemetry(
        node=node_name(node),
        interval_seconds=config.interval_seconds,
        idle_watts=idle_watts,
        busy_watts=busy_watts,
    )
    meter = heat_meter if heat_meter is not None else heat.HeatMeter()
    return tel, Shipper(tel, config, heat_meter=meter, psi_file=psi_file)
