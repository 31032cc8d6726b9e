"""What `make demo` sends through the gateway with the real `openai` client.

`ask` sends three short chat completions and prints which backend answered; `Load` runs worker
threads that stream completions until stopped and counts every request that fails (an exception,
or a stream without a finish_reason): the demo's proof that a model swap drops nothing.
May import: the standard library, openai (dev dependency, imported lazily).
Called by: dev.demo.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def base_url(endpoint: str) -> str:
    """The OpenAI base URL of `endpoint` (ends with /v1)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1") else f"{endpoint}/v1"


def ask(gateway: str, key: str, *, model: str) -> None:
    """Three "Hello!" chat completions; prints the answering backend, the reply and its tokens."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url(gateway), api_key=key, max_retries=0)
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Hello!"}], max_tokens=16
        )
        reply = raw.parse()
        tokens = reply.usage.completion_tokens if reply.usage else "?"
        print(
            f"    via {raw.headers.get('x-mlxfleet-backend')}: "
            f"{reply.choices[0].message.content!r} ({tokens} tokens)"
        )


def _stream(
    endpoints: list[str],
    key: str,
    stop: threading.Event,
    result: LoadResult,
    worker: int,
    model: str,
) -> None:
    from openai import OpenAI

    clients = [OpenAI(base_url=base_url(e), api_key=key, max_retries=0) for e in endpoints]
    i = worker
    while not stop.is_set():
        client = clients[i % len(clients)]
        i += 1
        try:
            finish = None
            stream = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"Say something, worker {worker}."}],
                max_tokens=24,
                stream=True,
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            if finish is None:
                raise RuntimeError("stream ended without finish_reason")
            with result.lock:
                result.ok += 1
        except Exception as exc:  # every failure is counted and shown
            with result.lock:
                result.failed += 1
                result.errors.append(f"{type(exc).__name__}: {exc}")


class Load:
    """`workers` threads streaming completions of `model` round-robin over `endpoints`."""

    def __init__(self, endpoints: list[str], key: str, *, model: str, workers: int) -> None:
        self.result = LoadResult()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=_stream,
                args=(endpoints, key, self._stop, self.result, w, model),
                daemon=True,
            )
            for w in range(workers)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> LoadResult:
        """Stop the workers (each finishes its request; at most 60 s each) and the counts."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        return self.result
