"""Embeddings throughput: inputs/s and tokens/s of a `/v1/embeddings` endpoint.

    python -m mlxfleet_agent.engines.bench --url http://127.0.0.1:P [--url2 URL] [--model NAME]
        [--batch 32] [--concurrency 4] [--requests 40] [--rounds 5]

`measure` sends `requests` POSTs of `batch` texts each, `concurrency` at a time, the way the
openai client does (base64 vectors), and counts inputs and the server's `usage.prompt_tokens`.
`compare` runs rounds against two endpoints (the engine directly and through the agent, in part
2), alternating which goes first, and reports each side's median and the median of the paired
ratios, the figure the issue's >= 0.95 goal is about. Texts are generated from a seed, so runs
are comparable.
May import: httpx and the standard library. Called by: benchmarks (part 2), tests, by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

_WORDS = (  # noqa: SIM905
    "fleet model swap memory token vector query document river ocean forest apple piano "
    "server request batch latency drain surge hold node agent cluster embedding rerank"
).split()


@dataclass(frozen=True, slots=True)
class Throughput:
    inputs: int
    tokens: int
    seconds: float

    @property
    def inputs_per_s(self) -> float:
        return self.inputs / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    first: list[Throughput]
    second: list[Throughput]

    def median(self, side: Sequence[Throughput], attr: str = "inputs_per_s") -> float:
        return float(statistics.median(getattr(t, attr) for t in side))

    def paired_ratio(self, attr: str = "inputs_per_s") -> float:
        """Median over rounds of second/first (e.g. agent/direct)."""
        return float(
            statistics.median(
                getattr(b, attr) / getattr(a, attr)
                for a, b in zip(self.first, self.second, strict=True)
                if getattr(a, attr) > 0
            )
        )


def texts(count: int, *, seed: int = 0, min_words: int = 8, max_words: int = 48) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(min_words, max_words)))
        for _ in range(count)
    ]


async def measure(
    client: httpx.AsyncClient,
    url: str,
    *,
    model: str | None,
    corpus: Sequence[str],
    batch: int,
    concurrency: int,
    requests: int,
    headers: dict[str, str] | None = None,
) -> Throughput:
    """Throughput of `requests` embedding calls; raises on any non-200 answer."""
    todo = list(range(requests))
    inputs = tokens = 0

    async def worker() -> None:
        nonlocal inputs, tokens
        while todo:
            i = todo.pop()
            start = (i * batch) % max(1, len(corpus) - batch + 1)
            body: dict[str, object] = {
                "input": list(corpus[start : start + batch]),
                "encoding_format": "base64",
            }
            if model is not None:
                body["model"] = model
            resp = await client.post(
                f"{url}/v1/embeddings", json=body, headers=headers, timeout=120.0
            )
            if resp.status_code != 200:
                raise RuntimeError(f"{url} answered {resp.status_code}: {resp.text[:300]}")
            answer = resp.json()
            inputs += len(answer["data"])
            tokens += int(answer["usage"]["prompt_tokens"])

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Throughput(inputs, tokens, time.perf_counter() - began)


async def compare(
    first: str,
    second: str,
    *,
    model: str | None,
    rounds: int,
    batch: int,
    concurrency: int,
    requests: int,
    seed: int = 0,
    headers: tuple[dict[str, str] | None, dict[str, str] | None] = (None, None),
) -> Comparison:
    corpus = texts(max(batch * 4, 256), seed=seed)
    a: list[Throughput] = []
    b: list[Throughput] = []
    async with httpx.AsyncClient() as client:
        for r in range(rounds):
            order = [(first, a, headers[0]), (second, b, headers[1])]
            for url, sink, hdrs in order if r % 2 == 0 else reversed(order):
                sink.append(
                    await measure(
                        client,
                        url,
                        model=model,
                        corpus=corpus,
                        batch=batch,
                        concurrency=concurrency,
                        requests=requests,
                        headers=hdrs,
                    )
                )
    return Comparison(a, b)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlxfleet_agent.engines.bench")
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--url2", help="a second endpoint to compare against --url")
    p.add_argument("--model")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    second = args.url2 or args.url
    result = asyncio.run(
        compare(
            args.url,
            second,
            model=args.model,
            rounds=args.rounds,
            batch=args.batch,
            concurrency=args.concurrency,
            requests=args.requests,
        )
    )
    for name, side in (("first", result.first), ("second", result.second)):
        print(
            f"{name}: {result.median(side):.1f} inputs/s, "
            f"{result.median(side, 'tokens_per_s'):.0f} tokens/s (median of {len(side)})"
        )
    print(f"second/first paired ratio: {result.paired_ratio():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
