"""A small streaming load generator for e2e tests and the benchmark: openai-client workers that
keep chat completions (streaming) running against data-plane endpoints and count failures.

`Load` pins each worker to one endpoint; `DiscoveredLoad` sends each request to one of the ready
endpoints that `discover` last returned (re-read in the background, as a Service proxy would)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass
class DiscoveredLoad:
    discover: Callable[[], list[str]]  # ready data-plane base URLs, e.g. from EndpointSlices
    model: str
    workers: int = 2
    refresh_s: float = 0.2
    max_tokens: int = 24
    ok: int = 0
    failed: int = 0
    served_by: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
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
                    base_url=endpoint + "/v1", api_key="unused", max_retries=0, timeout=120
                ),
            )
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
            except Exception as exc:  # every failure counts, whatever its type
                with self._lock:
                    self.failed += 1
                    self.errors.append(f"{endpoint}: {type(exc).__name__}: {exc}"[:300])
                time.sleep(0.2)

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
