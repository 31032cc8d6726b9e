"""The autoscaler of a ModelDeployment with spec.minReplicas / spec.maxReplicas (pure): how many
replicas it should have now, from its spec's bounds, the load the agents and the gateways report,
its last decision and an explicit `now`.

- Start: spec.replicas (clamped to the bounds) for a new deployment, and again whenever
  spec.replicas changes (a person, `kubectl scale`, HPA or KEDA set it: the last writer of
  spec.replicas sets the count, the autoscaler moves on from there). spec.replicas 0 is off.
- Load: ceil((requests in flight + queued on the agents + held at gateways) / spec.maxConcurrency)
  between max(minReplicas, 1) and maxReplicas, stabilised as HPA's `behavior` does: a scale-up
  takes the lowest recommendation of the last `up` window (a burst shorter than it is ignored;
  the count a start or a wake set counts as a recommendation of that moment),
  a scale-down the highest of the last `down` window (so the count follows a falling load only
  once it has stayed low), and the count never goes past a recommendation that wants the other
  way: no flapping.
- Idle: no request for spec.idleTimeout (the agents' idle clocks; nothing in flight, queued or
  held at a gateway) sends the count to spec.minReplicas, 0 included: the deployment sleeps.
- Demand: a request held at a gateway wakes a sleeping deployment at its start count.

The decision (`Scale`) is kept in status (desiredReplicas, autoscaling) and resumes from there
after a restart (`resume`); the recommendations of the windows are memory only (after a restart
a scale-down waits a whole window again, as HPA's does).
`wanted(md)` is the count everything else places: the decision once `attach`ed to the status, else
spec.replicas (a deployment without minReplicas / maxReplicas: HPA, KEDA or a person own it).
May import: the standard library, `api`, the agent `contract`, `core.kit.events`.
Called by: the ModelDeployment handler, `replicas`, `status`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mlxfleet_agent import contract
from mlxfleet_operator.api import deploymentspec, duration
from mlxfleet_operator.api import modeldemand as mdemand
from mlxfleet_operator.api import modeldeployment as mdep
from mlxfleet_operator.core.kit import events

Reason = mdep.ScaleReason


@dataclass(frozen=True)
class Bounds:
    """What the spec allows: the start count, the range, the idle timeout, the load a replica
    takes (spec.maxConcurrency)."""

    start: int
    low: int
    high: int
    capacity: int
    idle_timeout: timedelta | None = None

    @classmethod
    def of(cls, spec: deploymentspec.ModelDeploymentSpec) -> Bounds:
        low = spec.fewest_replicas
        high = spec.max_replicas if spec.max_replicas is not None else max(spec.replicas, low, 1)
        idle = spec.idle_timeout
        return cls(
            start=spec.replicas,
            low=low,
            high=max(high, low),
            capacity=spec.max_concurrency,
            idle_timeout=duration.parse(idle) if idle is not None else None,
        )

    @property
    def awake_low(self) -> int:
        """The fewest replicas load alone may leave (only idleness goes below one)."""
        return min(max(self.low, 1), self.high)

    def clamp_awake(self, count: int) -> int:
        return min(max(count, self.awake_low), self.high)


@dataclass(frozen=True)
class Load:
    """What the fleet reports for the deployment now."""

    busy: int = 0  # requests in flight and queued on its replicas (agents)
    waiting: int = 0  # requests held at gateways for it (fresh demand)
    idle_for: timedelta | None = None  # since its last request (None: no replica serves)


@dataclass(frozen=True)
class Windows:
    """Stabilisation windows (operator flags): scale up fast, down slowly."""

    up: timedelta = timedelta(seconds=5)
    down: timedelta = timedelta(seconds=120)


@dataclass(frozen=True)
class Scale:
    """One decision, and what the next one needs."""

    desired: int
    reason: Reason
    message: str
    changed_at: datetime | None  # when `desired` last changed
    base: int  # the spec.replicas it started from
    history: tuple[tuple[datetime, int], ...] = field(default=(), compare=False)

    def status(self) -> mdep.AutoscalingStatus:
        return mdep.AutoscalingStatus(
            reason=self.reason,
            message=self.message,
            last_scale_time=self.changed_at,
            from_replicas=self.base,
        )


def resume(status: mdep.ModelDeploymentStatus) -> Scale | None:
    """The last decision as status keeps it (None: never decided)."""
    found = status.autoscaling
    if found is None or status.desired_replicas is None:
        return None
    return Scale(
        desired=status.desired_replicas,
        reason=found.reason,
        message=found.message or "",
        changed_at=found.last_scale_time,
        base=found.from_replicas,
    )


def decide(
    bounds: Bounds, load: Load, last: Scale | None, *, now: datetime, windows: Windows
) -> Scale:
    """The count the deployment should have now (see the module docstring)."""
    if bounds.start == 0:
        return _to(last, 0, Reason.START, "spec.replicas is 0: off", bounds, now)
    if last is None or last.base != bounds.start:
        count = min(max(bounds.start, bounds.low), bounds.high)
        text = f"spec.replicas is {bounds.start}"
        return _to(last, count, Reason.START, text, bounds, now, ((now, count),))
    if last.desired == 0:
        count = bounds.clamp_awake(bounds.start)
        if load.waiting or load.busy:
            text = f"woken: {load.waiting + load.busy} requests wait for a replica"
            return _to(last, count, Reason.DEMAND, text, bounds, now, ((now, count),))
        if bounds.low > 0:  # spec.minReplicas raised while it slept
            text = f"spec.minReplicas is {bounds.low}"
            return _to(last, count, Reason.START, text, bounds, now, ((now, count),))
        return last
    idle = _idle(bounds, load)
    if idle is not None and last.desired > bounds.low:
        quiet, timeout = idle
        text = (
            f"no requests for {duration.format_duration(quiet)} "
            f"(idleTimeout {duration.format_duration(timeout)})"
        )
        text += ": sleeping" if bounds.low == 0 else ""
        return _to(last, bounds.low, Reason.IDLE, text, bounds, now)
    return _by_load(bounds, load, last, now=now, windows=windows)


def recommend(bounds: Bounds, load: Load) -> int:
    """The replicas the load asks for now (at least one: only idleness sleeps)."""
    demand = load.busy + load.waiting
    return bounds.clamp_awake(math.ceil(demand / max(bounds.capacity, 1)))


def _by_load(bounds: Bounds, load: Load, last: Scale, *, now: datetime, windows: Windows) -> Scale:
    rec = recommend(bounds, load)
    keep = max(windows.up, windows.down)
    history = (*(h for h in last.history if now - h[0] <= keep), (now, rec))
    current = bounds.clamp_awake(last.desired)
    up = min(r for t, r in history if now - t <= windows.up)
    down = max(r for t, r in history if now - t <= windows.down)
    demand = load.busy + load.waiting
    text = f"{demand} requests in flight or queued, {bounds.capacity} per replica"
    if up > current:
        return _to(last, up, Reason.LOAD, text, bounds, now, history)
    if down < current:
        return _to(last, down, Reason.LOAD, text, bounds, now, history)
    if current != last.desired:  # the bounds moved under it
        text = f"within spec.minReplicas..spec.maxReplicas ({bounds.low}..{bounds.high})"
        return _to(last, current, Reason.START, text, bounds, now, history)
    return _to(last, current, last.reason, last.message, bounds, now, history)


def _idle(bounds: Bounds, load: Load) -> tuple[timedelta, timedelta] | None:
    """(time without requests, idle timeout) once the timeout has passed with nothing in
    flight, queued or held; None otherwise (or when no replica reports its idle clock)."""
    timeout, quiet = bounds.idle_timeout, load.idle_for
    if timeout is None or quiet is None or load.busy or load.waiting or quiet < timeout:
        return None
    return quiet, timeout


def _to(
    last: Scale | None,
    count: int,
    reason: Reason,
    message: str,
    bounds: Bounds,
    now: datetime,
    history: Sequence[tuple[datetime, int]] = (),
) -> Scale:
    """A decision for `count`; reason, message and change time move only when the count does."""
    if last is not None and last.desired == count:
        return Scale(count, last.reason, last.message, last.changed_at, bounds.start, (*history,))
    return Scale(count, reason, message, now, bounds.start, (*history,))


# ---------------------------------------------------------------------------- what it reads


@dataclass(frozen=True)
class Observed:
    """One replica's slot as its agent last reported it, and when."""

    slot: contract.SlotStatus
    polled_at: datetime


@dataclass(frozen=True)
class Want:
    """One gateway replica's held requests for the deployment (a ModelDemand entry)."""

    gateway: str
    waiting: int
    since: datetime
    renewed: datetime


def fresh(want: Want, *, now: datetime) -> bool:
    """The gateway renewed its ModelDemand recently enough to be believed."""
    return now - want.renewed <= timedelta(seconds=mdemand.STALE_S)


def load_of(replicas: Sequence[Observed], wants: Sequence[Want], *, now: datetime) -> Load:
    """The load of the deployment: requests in flight and queued on its replicas, requests held
    at gateways (fresh ModelDemand entries only), and the time since its last request as the
    most recently used serving replica counts it (its agent's idle clock, plus the time since
    that answer)."""
    busy = sum(r.slot.in_flight + r.slot.queued for r in replicas)
    waiting = sum(w.waiting for w in wants if fresh(w, now=now))
    idle = [
        timedelta(seconds=r.slot.idle_seconds) + max(now - r.polled_at, timedelta(0))
        for r in replicas
        if r.slot.ready and r.slot.idle_seconds is not None
    ]
    return Load(busy=busy, waiting=waiting, idle_for=min(idle) if idle else None)


def wants_of(demand: mdemand.ModelDemand) -> dict[tuple[str, str], Want]:
    """A ModelDemand's entries by (namespace, deployment)."""
    spec = demand.spec
    return {
        (h.namespace, h.name): Want(spec.gateway, h.waiting, h.since, spec.renew_time)
        for h in spec.deployments
    }


def to_wake(
    wants: Mapping[tuple[str, str], Want],
    *,
    ready: Callable[[tuple[str, str]], int],
    told: Mapping[tuple[str, str], object],
    now: datetime,
) -> list[tuple[tuple[str, str], datetime]]:
    """The deployments a ModelDemand asks to wake now: fresh entries holding requests for a
    deployment with no ready replica, each (deployment, oldest request) once (`told`: what was
    asked already). Asking is only a nudge: the autoscaler reads the demand itself at the
    deployment's next reconcile; this makes that reconcile happen at once."""
    out = []
    for key, want in sorted(wants.items()):
        if want.waiting and fresh(want, now=now) and not ready(key) and told.get(key) != want.since:
            out.append((key, want.since))
    return out


# ------------------------------------------------------------------------ what it decides


def wanted(md: mdep.ModelDeployment) -> int:
    """The replicas to place now: the autoscaler's decision (`attach`) when it owns the count,
    else spec.replicas."""
    if md.spec.autoscaled and md.status.desired_replicas is not None:
        return md.status.desired_replicas
    return md.spec.replicas


def attach(md: mdep.ModelDeployment, scale: Scale | None) -> mdep.ModelDeployment:
    """`md` whose status carries the decision (what `wanted` and the new status read)."""
    if not md.spec.autoscaled or scale is None:
        return md
    status = md.status.model_copy(
        update={"desired_replicas": scale.desired, "autoscaling": scale.status()}
    )
    return md.model_copy(update={"status": status})


def scaled_event(before: int | None, scale: Scale) -> events.Event | None:
    """The Event a changed count posts (None: the count is what the status said)."""
    if before is None or before == scale.desired:
        return None
    if scale.desired == 0:
        return events.Event(reason="Sleeping", message=f"{before} -> 0 replicas: {scale.message}")
    reason = "Woken" if before == 0 else "Scaled"
    return events.Event(
        reason=reason, message=f"{before} -> {scale.desired} replicas: {scale.message}"
    )
