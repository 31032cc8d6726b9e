"""The Macs as the console's fleet page shows them, built from the watched objects (pure).

Per Mac: its Ready condition, chip, the memory bar (the weights of the models its slots hold,
the KV cache and runtime the rest of their estimate takes, what is free, what the agent keeps
out of its budget), heat and GPU where the agent reports them, the slots with loading or
download progress, and the conditions. Objects are read raw, as viewkit says why.
May import: the standard library, admin.viewkit. Called by: admin.api (for the console).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mlxfleet_gateway.admin import viewkit

JsonDict = viewkit.JsonDict
# the shared readers of raw values, short: the parsers below are dense with them
_d, _l, _int, _num = viewkit.as_mapping, viewkit.as_list, viewkit.as_int, viewkit.as_float

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
    download: viewkit.Progress | None


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
    ready: viewkit.Condition | None
    chip: str
    agent_version: str
    url: str
    approved: bool
    unschedulable: bool
    heartbeat: str
    memory: MemoryBar | None
    thermal: Thermal
    slots: list[Slot]
    transfers: list[tuple[str, viewkit.Progress]]
    conditions: list[viewkit.Condition]

    @property
    def models(self) -> list[str]:
        return [s.served for s in self.slots]


def _placements(deployments: Iterable[JsonDict]) -> dict[tuple[str, str], tuple[str, int | None]]:
    """(node, slot) -> (deployment id, estimated bytes per replica)."""
    out: dict[tuple[str, str], tuple[str, int | None]] = {}
    for md in deployments:
        status = _d(md.get("status"))
        est = _int(status.get("estimatedMemoryBytes"))
        did = f"{viewkit.namespace_of(md)}/{viewkit.name_of(md)}"
        for p in _l(status.get("placements")):
            p = _d(p)
            if p.get("node") and p.get("slot"):
                out[(str(p["node"]), str(p["slot"]))] = (did, est)
    return out


def node(obj: JsonDict, placed: Mapping[tuple[str, str], tuple[str, int | None]]) -> Node:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    name = viewkit.name_of(obj)
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
                download=viewkit.progress(s.get("download")),
            )
        )
    thermal = _d(status.get("thermal"))
    transfers = []
    for t in _l(status.get("transfers")):
        t = _d(t)
        p = viewkit.progress(t)
        if p is not None:
            transfers.append((str(t.get("source") or ""), p))
    return Node(
        name=name,
        ready=viewkit.ready_of(obj),
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
        conditions=viewkit.conditions(obj),
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
