"""What the scale benchmark measures with: API server request counts (its own /metrics, read as
admin), watches that keep the latest objects of a kind, what each change of an object changed
outside its status (kopf's bookkeeping annotations, finalizers), the operator's log lines by
kind, the CPU and memory of the operator (and the CPU of every other process on the box), py-spy
profiles folded into the functions that took the time, and the API server's own CPU profile
(Go pprof) read into its heaviest Kubernetes functions.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
Key = tuple[str, str, str]  # (verb, resource, subresource)


@dataclass(frozen=True)
class Admin:
    """The control plane's admin identity, from its kubeconfig."""

    server: str
    token: str
    ca: ssl.SSLContext

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Admin:
        config = json.loads(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        ca = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        return cls(cluster["server"], config["users"][0]["user"]["token"], ca)

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(
            base_url=self.server,
            headers={"Authorization": f"Bearer {self.token}"},
            verify=self.ca,
            timeout=timeout,
        )


def event_reasons(items: list[dict[str, Any]], *, since: str) -> list[tuple[str, int]]:
    """Kubernetes Events created at or after `since` (RFC 3339, the API server's clock, to the
    second) by `<involved kind> <reason>`, most first: what the Event POSTs of a window were
    about (an Event's own timestamps are the poster's; its creation is when it arrived)."""
    counts: Counter[str] = Counter()
    for item in items:
        created = str((item.get("metadata") or {}).get("creationTimestamp") or "")
        if created >= since:
            kind = (item.get("involvedObject") or {}).get("kind") or "?"
            counts[f"{kind} {item.get('reason') or '?'}"] += 1
    return counts.most_common()


def events_since(admin: Admin, since: str) -> list[tuple[str, int]]:
    """`event_reasons` of every Event in the cluster (one LIST, after the window it reports)."""
    with admin.client() as c:
        r = c.get("/api/v1/events")
        r.raise_for_status()
        return event_reasons(r.json().get("items") or [], since=since)


def request_counts(admin: Admin) -> Counter[Key]:
    """apiserver_request_total summed by (verb, resource, subresource) (`parse_requests`)."""
    with admin.client() as c:
        return parse_requests(c.get("/metrics").text)


def parse_requests(text: str) -> Counter[Key]:
    """apiserver_request_total summed by (verb, resource, subresource); a request the API server
    refused (code 400 and up) counts under its subresource with the code in brackets (`status
    [409]`, `[422]`): a write that failed and is tried again is a write the fleet paid twice for
    (kopf's JSON patches with a stale resourceVersion answer 422)."""
    out: Counter[Key] = Counter()
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found.group("labels")))
        sub, code = labels.get("subresource", ""), labels.get("code", "")
        if code.isdigit() and int(code) >= 400:
            sub = f"{sub} [{code}]".strip()
        key = (labels.get("verb", "?"), labels.get("resource", ""), sub)
        out[key] += int(float(found.group("value")))
    return out


_OP_SAMPLE = re.compile(
    r"^mlxfleet_operator_(reconcile_seconds_sum|reconcile_seconds_count|reconcile_seconds_bucket"
    r"|agent_calls_total)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$"
)


def operator_counts(url: str) -> Counter[str]:
    """The operator's own counters: reconciles (count, seconds, cumulative histogram buckets) by
    kind, agent calls by op and result, as `reconciles:<kind>`, `reconcile_s:<kind>`,
    `le:<kind>:<upper bound>` and `calls:<op>:<result>`."""
    try:
        text = httpx.get(url, timeout=30).text
    except httpx.HTTPError:
        return Counter()
    out: Counter[str] = Counter()
    for line in text.splitlines():
        found = _OP_SAMPLE.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found.group("labels")))
        value = float(found.group("value"))
        name = found.group(1)
        if name == "agent_calls_total":
            out[f"calls:{labels.get('op')}:{labels.get('result')}"] += value  # type: ignore[assignment]
        elif name.endswith("_bucket"):
            out[f"le:{labels.get('kind')}:{labels.get('le')}"] += value  # type: ignore[assignment]
        elif name.endswith("_sum"):
            out[f"reconcile_s:{labels.get('kind')}"] += value  # type: ignore[assignment]
        else:
            out[f"reconciles:{labels.get('kind')}"] += value  # type: ignore[assignment]
    return out


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The q-quantile of a cumulative histogram ({upper bound: count <= bound}, +Inf included),
    interpolated linearly inside its bucket as Prometheus' histogram_quantile does; a quantile in
    the +Inf bucket is reported as the largest finite bound. None without observations."""
    bounds = sorted(buckets)
    total = buckets.get(float("inf"), 0.0)
    if not bounds or total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def delta(after: Counter[Key], before: Counter[Key]) -> Counter[Key]:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)})


def writes(counts: Counter[Key]) -> int:
    return sum(v for (verb, _, _), v in counts.items() if verb in WRITE_VERBS)


def by_verb(counts: Counter[Key]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for (verb, _, _), v in counts.items():
        out[verb] += v
    return dict(out.most_common())


def top_requests(counts: Counter[Key], n: int = 12) -> list[tuple[str, int]]:
    def name(k: Key) -> str:
        verb, resource, sub = k
        return f"{verb} {resource}{'/' + sub if sub else ''}"

    return [(name(k), v) for k, v in counts.most_common(n)]


class Watcher:
    """The latest object of each name of one kind, kept by LIST + WATCH in a thread; `on_event`
    sees every change (with the monotonic time it arrived)."""

    def __init__(
        self,
        admin: Admin,
        path: str,
        *,
        on_event: Callable[[str, dict[str, Any], float], None] | None = None,
    ) -> None:
        self.admin = admin
        self.path = path
        self.on_event = on_event
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {path}")
        self.synced = threading.Event()

    def start(self) -> Watcher:
        self._thread.start()
        if not self.synced.wait(60):
            raise TimeoutError(f"no initial list of {self.path}")
        return self

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return dict(self.objects)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list_and_watch()
            except (httpx.HTTPError, ValueError):
                time.sleep(1)

    def _list_and_watch(self) -> None:
        with self.admin.client(timeout=120) as c:
            got = c.get(self.path)
            got.raise_for_status()  # e.g. 429 while new CRDs' storage initialises: again
            listed = got.json()
            with self.lock:
                self.objects = {o["metadata"]["name"]: o for o in listed["items"]}
            self.synced.set()
            rv = listed["metadata"]["resourceVersion"]
            while not self._stop.is_set():
                params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "300"}
                with c.stream("GET", self.path, params=params, timeout=None) as stream:
                    for line in stream.iter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            return  # usually 410 Gone: list again
                        rv = obj["metadata"]["resourceVersion"]
                        name = obj["metadata"]["name"]
                        with self.lock:
                            if event["type"] == "DELETED":
                                self.objects.pop(name, None)
                            else:
                                self.objects[name] = obj
                        if self.on_event is not None:
                            self.on_event(event["type"], obj, time.monotonic())
                        if self._stop.is_set():
                            return


class Changes:
    """What each MODIFIED event of the watched objects changed: every annotation key set,
    changed or removed, finalizers, labels, `spec` (by `generation`) and each status field
    (`status_changes`), counted as `"<kind> <what>"`; a `Watcher`'s `on_event`
    (`changes.seen(kind)`). Which object writes are kopf's own bookkeeping, and which status
    writes changed what, is read from here (the API server counts only verbs)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def seen(self, kind: str) -> Callable[[str, dict[str, Any], float], None]:
        def on_event(kind_of_event: str, obj: dict[str, Any], _: float) -> None:
            meta = obj.get("metadata") or {}
            key = (kind, str(meta.get("name")))
            now = {
                "annotations": dict(meta.get("annotations") or {}),
                "finalizers": list(meta.get("finalizers") or []),
                "labels": dict(meta.get("labels") or {}),
                "generation": meta.get("generation"),
                "status": obj.get("status") or {},
            }
            with self._lock:
                before = self._last.get(key)
                self._last[key] = now
                if kind_of_event == "DELETED":
                    self._last.pop(key, None)
                if before is None or kind_of_event != "MODIFIED":
                    return
                for what in metadata_changes(before, now):
                    self.counts[f"{kind} {what}"] += 1

        return on_event

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def metadata_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`annotation <key> set|changed|removed`, `finalizers`, `labels`, `spec` between two
    versions of an object's metadata (as `Changes` keeps it)."""
    out = []
    old, new = before["annotations"], now["annotations"]
    for k in sorted(set(old) | set(new)):
        if k not in old:
            out.append(f"annotation {k} set")
        elif k not in new:
            out.append(f"annotation {k} removed")
        elif old[k] != new[k]:
            out.append(f"annotation {k} changed")
    for part in ("finalizers", "labels"):
        if before[part] != now[part]:
            out.append(part)
    if before["generation"] != now["generation"]:
        out.append("spec")
    return out + status_changes(before.get("status") or {}, now.get("status") or {})


def status_changes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`status.<field>` for each top-level status field that changed; conditions by type and
    what changed in them (`status.conditions[Ready].message`). None at all: the event was a
    write outside status (or an unchanged status: the API server sends no event for it)."""
    out = []
    for k in sorted(set(before) | set(now)):
        if k == "conditions" or before.get(k) == now.get(k):
            continue
        out.append(f"status.{k}")
    old = {c.get("type"): c for c in before.get("conditions") or []}
    new = {c.get("type"): c for c in now.get("conditions") or []}
    for kind in sorted(set(old) | set(new), key=str):
        a, b = old.get(kind) or {}, new.get(kind) or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"status.conditions[{kind}].{key}")
    return out


_KOPF_FAILURE = re.compile(
    r"(Handler|Timer|Daemon) '([^']+)' failed (temporarily|permanently|with an exception)"
    r"[^:]*: (.*)$"
)
_NAME = r"[\w.-]*\d[\w.-]*"  # names with digits (mac-0042, md-17, 10.0.0.1): left out
_NAMES = re.compile(rf"{_NAME}(, {_NAME})*")


def log_kinds(text: str, *, top: int = 12) -> list[tuple[str, int]]:
    """The operator's ERROR lines by kind: kopf's handler failures as `<handler> failed
    <how>: <message without names>`, any other ERROR line by its first words."""
    kinds: Counter[str] = Counter()
    for line in text.splitlines():
        if "ERROR" not in line:
            continue
        found = _KOPF_FAILURE.search(line)
        if found is not None:
            what, handler, how, message = found.groups()
            text_ = _NAMES.sub("*", message)[:60]
            kinds[f"{what.lower()} {handler} failed {how}: {text_}"] += 1
        else:
            kinds[" ".join(line.split("ERROR", 1)[1].split()[:6])] += 1
    return kinds.most_common(top)


@dataclass
class ProcessSampler:
    """CPU seconds and resident memory of one process (and its children), sampled in a thread."""

    pid: int
    interval: float = 0.5
    rss_max: int = 0
    rss_last: int = 0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, cpu_s, rss)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ProcessSampler:
        threading.Thread(target=self._run, daemon=True, name=f"sample {self.pid}").start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def cpu_seconds(self) -> float:
        proc = psutil.Process(self.pid)
        t = proc.cpu_times()
        return float(t.user + t.system)

    def _run(self) -> None:
        try:
            proc = psutil.Process(self.pid)
            while not self._stop.is_set():
                t = proc.cpu_times()
                rss = int(proc.memory_info().rss)
                self.rss_last = rss
                self.rss_max = max(self.rss_max, rss)
                self.samples.append((time.monotonic(), float(t.user + t.system), rss))
                time.sleep(self.interval)
        except psutil.Error:
            return

    def window(self, start: float, end: float) -> tuple[float, int]:
        """(CPU seconds used, max RSS) between two monotonic times."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return 0.0, self.rss_last
        return inside[-1][1] - inside[0][1], max(s[2] for s in inside)


@dataclass
class Profile:
    """py-spy samples of a process, folded by function."""

    samples: int
    inclusive: list[tuple[str, float]]  # (function, share of samples)
    own: list[tuple[str, float]]


def profile(pid: int, seconds: float, *, out: Path | None = None, rate: int = 50) -> Profile:
    """Sample `pid` with py-spy for `seconds` (non-blocking: the process is not paused)."""
    target = out or Path(tempfile.mkdtemp()) / "pyspy.txt"
    proc = subprocess.run(
        [
            str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, int(seconds))),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=False,
    )
    if proc.returncode != 0 or not target.exists():
        raise RuntimeError(f"py-spy failed: {proc.stderr.strip()[-500:]}")
    return fold(target.read_text())


def apiserver_profile(admin: Admin, seconds: float, *, out: Path) -> list[tuple[str, float]]:
    """The API server's CPU profile over `seconds` (`/debug/pprof/profile`, served when the
    control plane started with `profiling`), saved at `out`, and its heaviest Kubernetes
    functions by inclusive share (`pprof_top`); empty without `go` on PATH to read it (the
    saved file is still there: `go tool pprof -top -cum <file>` anywhere)."""
    with admin.client(timeout=seconds + 60) as c:
        answer = c.get("/debug/pprof/profile", params={"seconds": max(1, int(seconds))})
        answer.raise_for_status()
    out.write_bytes(answer.content)
    go = shutil.which("go")
    if go is None:
        return []
    read = subprocess.run(
        [go, "tool", "pprof", "-top", "-cum", "-nodecount=500", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return pprof_top(read.stdout)


def pprof_top(text: str, *, top: int = 20) -> list[tuple[str, float]]:
    """`go tool pprof -top -cum` output -> the first `top` functions of Kubernetes itself
    (`k8s.io/`, `sigs.k8s.io/`: the request path, storage, validation, not Go's runtime), each
    with its inclusive share of the samples."""
    found: list[tuple[str, float]] = []
    for line in text.splitlines():
        cols = line.split(maxsplit=5)
        if len(cols) < 6 or not cols[4].endswith("%"):
            continue
        name = cols[5]
        if not name.startswith(("k8s.io/", "sigs.k8s.io/")):
            continue
        try:
            share = round(float(cols[4].removesuffix("%")) / 100, 4)
        except ValueError:
            continue
        found.append((name, share))
        if len(found) == top:
            break
    return found


def fold(raw: str, *, top: int = 15) -> Profile:
    """Collapsed stacks (`a;b;c N` lines) -> inclusive and own shares per function."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_short(f) for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += n
        own[frames[-1]] += n
    share = 1 / total if total else 0.0
    return Profile(
        samples=total,
        inclusive=[(k, v * share) for k, v in inclusive.most_common(top)],
        own=[(k, v * share) for k, v in own.most_common(top)],
    )


def _short(frame: str) -> str:
    """`func (path/to/module.py:123)` -> `func (module.py)`: lines apart, one function."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    for anchor in ("mlxfleet_operator", "kopf", "kubernetes", "pydantic", "httpx", "asyncio"):
        if anchor in parts:
            return f"{name} ({'/'.join(parts[parts.index(anchor) :])})"
    return f"{name} ({parts[-1]})"
