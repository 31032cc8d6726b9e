"""What the console's views share: watched objects read as they are (pure).

The objects are read raw (dicts in the API server's camelCase), not through the operator's
models, so a field a newer operator writes (thermal and GPU state) shows as soon as it is there
and an object one version does not parse still shows. Here: tolerant readers of raw values
(`as_mapping`, `as_list`, `as_int`, `as_float`: a value of the wrong type reads as empty or
unknown), an object's name, namespace and conditions (`Condition`, its Ready one), download
progress (`Progress`) and byte sizes as people read them (`gib`).
May import: the standard library. Called by: admin.nodeview, admin.deploymentview,
admin.swapview, admin.api, console.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JsonDict = Mapping[str, Any]


def as_mapping(value: Any) -> JsonDict:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return None


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def name_of(obj: JsonDict) -> str:
    return str(as_mapping(obj.get("metadata")).get("name") or "")


def namespace_of(obj: JsonDict) -> str:
    return str(as_mapping(obj.get("metadata")).get("namespace") or "")


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
    for c in as_list(as_mapping(obj.get("status")).get("conditions")):
        c = as_mapping(c)
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


def progress(value: Any) -> Progress | None:
    """A download's or transfer's progress (`doneBytes` of `totalBytes`), None when unknown."""
    d = as_mapping(value)
    done = as_int(d.get("doneBytes"))
    total = as_int(d.get("totalBytes"))
    if done is None or not total:
        return None
    return Progress(done, total, as_float(d.get("bytesPerSecond")))
