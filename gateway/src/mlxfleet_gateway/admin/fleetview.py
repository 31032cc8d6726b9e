"""What the console shows of the fleet, built from the watched objects as they are (pure).

The objects are read raw (dicts in the API server's camelCase), not through the operator's
models, so a field a newer operator writes (thermal and GPU state) shows as soon as it is there
and an object one version does not parse still shows. Per Mac: its Ready condition, chip, the
memory bar (the weights of the models its slots hold, the KV cache and runtime the rest of their
estimate takes, what is free, what the agent keeps out of its budget), heat and GPU where the
agent reports them, the slots with loading or download progress, and the conditions. Per
deployment: replicas, where, why not Ready, its SwapPlan; per route: rules with the split in
force; per SwapPlan: its steps.
May import: the standard library. Called by: admin.api, console.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JsonDict = Mapping[str, Any]


def _d(value: Any) -> JsonDict:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def name_of(obj: JsonDict) -> str:
    return str(_d(obj.get("metadata")).get("name") or "")


def namespace_of(obj: JsonDict) -> str:
    return str(_d(obj.get("metadata")).get("namespace") or "")


def gib(n: int | float | None) -> str:
    if n is None:
        return "?"
    if abs(n) >= 1024**3:
        return f"{n / 1024**3:.1f} GiB"
    if abs(n) >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n / 1024:.0f} KiB"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str

    @property
    def bad(self) -> bool:
        """Worth a look: Ready not True, or a problem condition (pressure, doctor) that is."""
        if self.type in ("Ready", "Schedulable", "Approved"):
            return self.status != "True"
        return self.status == "True" and self.type not in ("Reconciling",)


def conditions(obj: JsonDict) -> list[Condition]:
    out = []
    for c in _l(_d(obj.get("status")).get("conditions")):
        c = _d(c)
        out.append(
            Condition(
                str(c.get("type") or ""),
                str(c.get("status") or "Unknown"),
                str(c.get("reason") or ""),
                str(c.get("message") or ""),
            )
        )
    return out


def ready_of(obj: JsonDict) -> Condition | None:
    return next((c for c in conditions(obj) if c.type == "Ready"), None)


@dataclass(frozen=True, slots=True)
class Progress:
    done: int
    total: int
    rate: float | None = None  # bytes per second

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else 0.0

    def text(self) -> str:
        rate = f", {self.rate / 1e6:.1f} MB/s" if self.rate else ""
        return f"{gib(self.done)} / {gib(self.total)} ({self.percent:.0f}%{rate})"


def _progress(value: Any) -> Progress | None:
    d = _d(value)
    done = _int(d.get("doneBytes"))
    total = _int(d.get("totalBytes"))
    if done is None or not total:
        return None
    return Progress(done, total, _num(d.get("bytesPerSecond")))


MIN_VISIBLE = 0.5  # percent: the narrowest a memory-bar part that holds anything is drawn


@dataclass(frozen=True, slots=True)
class MemoryBar:
    """Bytes of the Mac's unified memory, by what holds them (they sum to `total`)."""

    total: int
    weights: int
    kv: int  # the KV cache and runtime: the rest of the slots' estimates
    free: int
    other: int  # outside the agent's budget (macOS, the reserve), or not accounted

    def percent(self, part: int) -> float:
        return round(100.0 * part / self.total, 2) if self.total else 0.0

    def parts(self) -> list[tuple[str, str, int, float]]:
        """(css class, label, bytes, percent of the bar's width) left to right. A part that holds
        any bytes is at least `MIN_VISIBLE` percent wide (a small model's weights on a 192 GB
        Mac would round to nothing), taken from the widest part."""
        sizes = [
            ("weights", "weights", self.weights),
            ("kv", "KV cache + runtime", self.kv),
            ("free", "free", self.free),
            ("other", "macOS + reserve", self.other),
        ]
        widths = [max(self.percent(b), MIN_VISIBLE) if b > 0 else 0.0 for _, _, b in sizes]
        excess = sum(widths) - sum(self.percent(b) for _, _, b in sizes)
        if excess > 0:
            widest = max(range(len(widths)), key=widths.__getitem__)
            widths[widest] = round(max(0.0, widths[widest] - excess), 2)
        return [(cls, label, b, w) for (cls, label, b), w in zip(sizes, widths, strict=True)]


@dataclass(frozen=True, slots=True)
class Slot:
    name: str
    served: str
    source: str
    phase: str
    ready: bool
    deployment: str | None  # namespace/name
    weights: int | None
    estimate: int | None
    download: Progress | None


@dataclass(frozen=True, slots=True)
class Thermal:
    level: str | None
    gpu_percent: int | None
    gpu_celsius: int | None
    cpu_celsius: int | None
    watts: float | None

    @property
    def known(self) -> bool:
        return any(
            v is not None
            for v in (self.level, self.gpu_percent, self.gpu_celsius, self.cpu_celsius, self.watts)
        )


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    ready: Condition | None
    chip: str
    agent_version: str
    url: str
    approved: bool
    unschedulable: bool
    heartbeat: str
    memory: MemoryBar | None
    thermal: Thermal
    slots: list[Slot]
    transfers: list[tuple[str, Progress]]
    conditions: list[Condition]

    @property
    def models(self) -> list[str]:
        return [s.served for s in self.slots]


def _placements(deployments: Iterable[JsonDict]) -> dict[tuple[str, str], tuple[str, int | None]]:
    """(node, slot) -> (deployment id, estimated bytes per replica)."""
    out: dict[tuple[str, str], tuple[str, int | None]] = {}
    for md in deployments:
        status = _d(md.get("status"))
        est = _int(status.get("estimatedMemoryBytes"))
        did = f"{namespace_of(md)}/{name_of(md)}"
        for p in _l(status.get("placements")):
            p = _d(p)
            if p.get("node") and p.get("slot"):
                out[(str(p["node"]), str(p["slot"]))] = (did, est)
    return out


def node(obj: JsonDict, placed: Mapping[tuple[str, str], tuple[str, int | None]]) -> Node:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    name = name_of(obj)
    weights_of: dict[tuple[str, str], int] = {}
    for m in _l(status.get("cachedModels")):
        m = _d(m)
        size = _int(m.get("sizeBytes"))
        if size is not None:
            weights_of[(str(m.get("source") or ""), str(m.get("revision") or ""))] = size
    slots = []
    for s in _l(status.get("slots")):
        s = _d(s)
        sname = str(s.get("name") or "")
        dep, est = placed.get((name, sname), (None, None))
        src, rev = str(s.get("source") or ""), str(s.get("revision") or "")
        slots.append(
            Slot(
                name=sname,
                served=str(s.get("servedName") or sname),
                source=src,
                phase=str(s.get("phase") or "Unknown"),
                ready=bool(s.get("ready")),
                deployment=dep,
                weights=weights_of.get((src, rev)),
                estimate=est,
                download=_progress(s.get("download")),
            )
        )
    thermal = _d(status.get("thermal"))
    transfers = []
    for t in _l(status.get("transfers")):
        t = _d(t)
        p = _progress(t)
        if p is not None:
            transfers.append((str(t.get("source") or ""), p))
    return Node(
        name=name,
        ready=ready_of(obj),
        chip=str(status.get("chip") or _d(spec.get("hardware")).get("chip") or ""),
        agent_version=str(status.get("agentVersion") or ""),
        url=str(_d(spec.get("agent")).get("url") or ""),
        approved=spec.get("approved") is not False,
        unschedulable=bool(spec.get("unschedulable")),
        heartbeat=str(status.get("lastHeartbeatTime") or ""),
        memory=memory_bar(_d(status.get("memory")), slots),
        thermal=Thermal(
            level=str(thermal["level"]) if thermal.get("level") else None,
            gpu_percent=_int(thermal.get("gpuUtilizationPercent")),
            gpu_celsius=_int(thermal.get("gpuTemperatureCelsius")),
            cpu_celsius=_int(thermal.get("cpuTemperatureCelsius")),
            watts=_num(thermal.get("powerWatts")),
        ),
        slots=slots,
        transfers=transfers,
        conditions=conditions(obj),
    )


def memory_bar(memory: JsonDict, slots: list[Slot]) -> MemoryBar | None:
    """The bar from the agent's figures: weights of the slots that hold memory, the rest of what
    the slots use (KV cache + runtime), free, and what lies outside the agent's budget."""
    total = _int(memory.get("totalBytes"))
    allocatable = _int(memory.get("allocatableBytes"))
    if not total or allocatable is None:
        return None
    used = _int(memory.get("usedBytes")) or 0
    free = _int(memory.get("freeBytes"))
    free = max(0, allocatable - used) if free is None else free
    held = [s for s in slots if s.phase not in ("Failed", "Pending")]
    weights = min(used, sum(s.weights or 0 for s in held))
    kv = max(0, used - weights)
    other = max(0, total - weights - kv - free)
    return MemoryBar(total=total, weights=weights, kv=kv, free=free, other=other)


def nodes(raw_nodes: Iterable[JsonDict], deployments: Iterable[JsonDict]) -> list[Node]:
    placed = _placements(deployments)
    return sorted((node(n, placed) for n in raw_nodes), key=lambda n: n.name)


# ---- deployments and routes -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    phase: str
    ready: bool
    message: str
    download: Progress | None


@dataclass(frozen=True, slots=True)
class Live:
    """Live figures of one model name through this gateway (console.live)."""

    tokens_per_s: float
    ttft_ms: float | None
    requests_per_s: float


@dataclass(frozen=True, slots=True)
class Deployment:
    namespace: str
    name: str
    served: str
    source: str
    engine: str
    replicas: int
    ready_replicas: int
    ready: Condition | None
    placements: list[Placement]
    swap_plan: str
    live: Live | None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def deployments(raw: Iterable[JsonDict], live: Mapping[str, Live]) -> list[Deployment]:
    out = []
    for md in raw:
        spec, status = _d(md.get("spec")), _d(md.get("status"))
        model = _d(spec.get("model"))
        served = str(status.get("servedName") or model.get("servedName") or name_of(md))
        placements = [
            Placement(
                node=str(_d(p).get("node") or ""),
                phase=str(_d(p).get("phase") or ""),
                ready=bool(_d(p).get("ready")),
                message=str(_d(p).get("message") or ""),
                download=_progress(_d(p).get("download")),
            )
            for p in _l(status.get("placements"))
        ]
        out.append(
            Deployment(
                namespace=namespace_of(md),
                name=name_of(md),
                served=served,
                source=str(model.get("source") or ""),
                engine=str(_d(spec.get("engine")).get("name") or "mlx-lm"),
                replicas=_int(spec.get("replicas")) or 0,
                ready_replicas=_int(status.get("readyReplicas")) or 0,
                ready=ready_of(md),
                placements=placements,
                swap_plan=str(status.get("swapPlan") or ""),
                live=live.get(served),
            )
        )
    return sorted(out, key=lambda d: (d.namespace, d.name))


@dataclass(frozen=True, slots=True)
class RouteBackend:
    rule: str
    name: str
    weight: int
    percent: float | None  # the split in force (status.split)
    ready: bool | None
    message: str


@dataclass(frozen=True, slots=True)
class Route:
    namespace: str
    name: str
    names: list[str]
    ready: Condition | None
    backends: list[RouteBackend]
    live: Live | None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def _backend_name(b: JsonDict) -> str:
    return str(b.get("name") or b.get("deployment") or "external")


def routes(raw: Iterable[JsonDict], live: Mapping[str, Live]) -> list[Route]:
    out = []
    for r in raw:
        spec, status = _d(r.get("spec")), _d(r.get("status"))
        split = {
            (str(_d(s).get("rule")), str(_d(s).get("backend"))): _num(_d(s).get("percent"))
            for s in _l(status.get("split"))
        }
        ready = {
            (str(_d(b).get("rule")), str(_d(b).get("name"))): _d(b)
            for b in _l(status.get("backends"))
        }
        backends = []
        rules = [
            (str(_d(x).get("name") or ""), _l(_d(x).get("backends"))) for x in _l(spec.get("rules"))
        ]
        fallback = _d(spec.get("fallback"))
        if fallback:
            rules.append(("fallback", _l(fallback.get("backends"))))
        for rule, items in rules:
            for b in items:
                b = _d(b)
                bn = _backend_name(b)
                st = ready.get((rule, bn), {})
                backends.append(
                    RouteBackend(
                        rule=rule,
                        name=bn,
                        weight=_int(b.get("weight")) or 0 if "weight" in b else 1,
                        percent=split.get((rule, bn)),
                        ready=bool(st["ready"]) if "ready" in st else None,
                        message=str(st.get("message") or ""),
                    )
                )
        names = [str(n) for n in _l(status.get("names")) or _l(spec.get("names"))] or [name_of(r)]
        out.append(
            Route(
                namespace=namespace_of(r),
                name=name_of(r),
                names=names,
                ready=ready_of(r),
                backends=backends,
                live=next((live[n] for n in names if n in live), None),
            )
        )
    return sorted(out, key=lambda r: (r.namespace, r.name))


# ---- SwapPlans ---------------------------------------------------------------------------------

TERMINAL = frozenset({"Completed", "Failed", "RolledBack"})


@dataclass(frozen=True, slots=True)
class Step:
    node: str
    phase: str
    strategy: str
    started: str
    warm: str
    switched: str
    drained: str
    finished: str
    served: int | None
    failed: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    namespace: str
    name: str
    deployment: str
    target: str
    phase: str
    progress: str
    paused: bool
    created: str
    steps: list[Step] = field(default_factory=list)
    may_approve: bool = False  # the viewer may patch it (filled in per viewer)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def waiting(self) -> bool:
        """Paused before it finished: it waits for a person to approve it."""
        return self.paused and self.phase not in TERMINAL


def _time(value: Any) -> str:
    text = str(value or "")
    return text[11:19] if len(text) >= 19 else text  # HH:MM:SS of an RFC 3339 time


def plans(raw: Iterable[JsonDict]) -> list[Plan]:
    out = []
    for p in raw:
        spec, status = _d(p.get("spec")), _d(p.get("status"))
        target = _d(spec.get("target"))
        steps = [
            Step(
                node=str(_d(s).get("node") or ""),
                phase=str(_d(s).get("phase") or "Pending"),
                strategy=str(_d(s).get("strategy") or ""),
                started=_time(_d(s).get("startedAt")),
                warm=_time(_d(s).get("warmAt")),
                switched=_time(_d(s).get("switchedAt")),
                drained=_time(_d(s).get("drainedAt")),
                finished=_time(_d(s).get("finishedAt")),
                served=_int(_d(s).get("requestsServed")),
                failed=_int(_d(s).get("requestsFailed")),
                message=str(_d(s).get("message") or ""),
            )
            for s in _l(status.get("steps"))
        ]
        out.append(
            Plan(
                namespace=namespace_of(p),
                name=name_of(p),
                deployment=str(_d(spec.get("deploymentRef")).get("name") or ""),
                target=str(target.get("source") or "")
                + (f"@{target['revision']}" if target.get("revision") else ""),
                phase=str(status.get("phase") or ("Paused" if spec.get("paused") else "Pending")),
                progress=str(status.get("progress") or ""),
                paused=bool(spec.get("paused")),
                created=str(_d(p.get("metadata")).get("creationTimestamp") or ""),
                steps=steps,
            )
        )
    # the running and waiting ones first, then the newest
    return sorted(out, key=lambda p: (p.phase in TERMINAL, _neg(p.created), p.id))


def _neg(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)
