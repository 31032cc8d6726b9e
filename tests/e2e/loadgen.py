"""A small streaming load generator for e2e tests and the benchmark: openai-client workers that
keep chat completions (streaming) running against data-plane endpoints and count failures."""

from __future__ import annotations

import threading
import time
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
