"""A small streaming load generator for e2e and fault tests and the benchmark: openai-client
workers that keep chat completions (streaming) running against data-plane endpoints and count
every request's outcome.

`Load` pins each worker to one endpoint; `DiscoveredLoad` sends each request to one of the ready
endpoints that `discover` last returned (re-read in the background, as a Service proxy would) and
records each request (`Outcome`: endpoint, start, end, error). A fixed base URL (a gateway, an
agent's data plane) is `DiscoveredLoad(fixed(url), ...)`. As a process (clients inside a network
namespace): `python -m tests.e2e.loadgen --base-url URL --model M --out FILE` runs until SIGTERM
or `--seconds`, then writes the outcomes as JSON."""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import openai


@dataclass
class Load:
    endpoints: list[str]
    model: str
    workers_per_endpoint: int = 1
    max_tokens: int = 24
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _work(self, endpoint: str) -> None:
        client = openai.OpenAI(
            base_url=endpoint + "/v1", api_key="unused", max_retries=0, timeout=120
        )
        while not self._stop.is_set():
            try:
                stream = client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": "tell me a story"}],
                    max_tokens=self.max_tokens,
                    stream=True,
                )
                chunks = sum(1 for _ in stream)
                if chunks == 0:
                    raise RuntimeError("empty stream")
                with self._lock:
                    self.ok += 1
            except Exception as exc:  # every failure counts, whatever its type
                with self._lock:
                    self.failed += 1
                    self.errors.append(f"{endpoint}: {type(exc).__name__}: {exc}"[:300])
                time.sleep(0.2)

    def __enter__(self) -> Load:
        for endpoint in self.endpoints:
            for _ in range(self.workers_per_endpoint):
                t = threading.Thread(target=self._work, args=(endpoint,), daemon=True)
                t.start()
                self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=150)


@dataclass(frozen=True)
class Outcome:
    """One request: where it went, when it started and ended (unix time), its error (None: ok)."""

    endpoint: str
    started: float
    ended: float
    error: str | None = None


def fixed(*urls: str) -> Callable[[], list[str]]:
    """`discover` for fixed base URLs (a gateway, one agent)."""
    return lambda: list(urls)


@dataclass
class DiscoveredLoad:
    discover: Callable[[], list[str]]  # ready data-plane base URLs, e.g. from EndpointSlices
    model: str
    workers: int = 2
    refresh_s: float = 0.2
    max_tokens: int = 24
    timeout: float = 120.0  # per request: a request never hangs unrecorded
    api_key: str = "unused"
    ok: int = 0
    failed: int = 0
    started: int = 0
    served_by: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def _refresh(self) -> None:
        while not self._stop.is_set():
            try:
                found = self.discover()
            except Exception as exc:  # a failed read keeps the last view
                with self._lock:
                    self.errors.append(f"discover: {type(exc).__name__}: {exc}"[:300])
            else:
                with self._lock:
                    self.endpoints = found
            self._stop.wait(self.refresh_s)

    def _pick(self) -> str | None:
        with self._lock:
            if not self.endpoints:
                return None
            return self.endpoints[next(self._turn) % len(self.endpoints)]

    def _work(self) -> None:
        clients: dict[str, openai.OpenAI] = {}
        while not self._stop.is_set():
            endpoint = self._pick()
            if endpoint is None:
                time.sleep(0.1)
                continue
            client = clients.setdefault(
                endpoint,
                openai.OpenAI(
                    base_url=endpoint + "/v1",
                    api_key=self.api_key,
                    max_retries=0,
                    timeout=self.timeout,
                ),
            )
            began = time.time()
            with self._lock:
                self.started += 1
            try:
                stream = client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "user", "content": "tell me a story"}],
                    max_tokens=self.max_tokens,
                    stream=True,
                )
                if sum(1 for _ in stream) == 0:
                    raise RuntimeError("empty stream")
                with self._lock:
                    self.ok += 1
                    self.served_by[endpoint] = self.served_by.get(endpoint, 0) + 1
                    self.outcomes.append(Outcome(endpoint, began, time.time()))
            except Exception as exc:  # every failure counts, whatever its type
                error = f"{type(exc).__name__}: {exc}"[:300]
                with self._lock:
                    self.failed += 1
                    self.errors.append(f"{endpoint}: {error}")
                    self.outcomes.append(Outcome(endpoint, began, time.time(), error))
                time.sleep(0.2)

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list[Outcome]:
        """Failed requests that started in [since, until)."""
        with self._lock:
            return [o for o in self.outcomes if o.error and since <= o.started < until]

    def lost(self) -> int:
        """Requests started but never finished (0 once the load has stopped)."""
        with self._lock:
            return self.started - len(self.outcomes)

    def __enter__(self) -> DiscoveredLoad:
        self.endpoints = self.discover()
        targets = [self._refresh] + [self._work] * self.workers
        for target in targets:
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=150)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.e2e.loadgen")
    p.add_argument("--base-url", action="append", required=True, help="repeatable")
    p.add_argument("--model", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3600.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--api-key", default="unused")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    load = DiscoveredLoad(
        fixed(*args.base_url),
        args.model,
        workers=args.workers,
        timeout=args.timeout,
        api_key=args.api_key,
    )
    with load:
        done.wait(args.seconds)
    summary = {
        "ok": load.ok,
        "failed": load.failed,
        "started": load.started,
        "outcomes": [asdict(o) for o in load.outcomes],
    }
    with open(args.out, "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main()
