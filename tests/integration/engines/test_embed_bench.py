"""The embeddings benchmark building block against a real engine (part 2 compares it through the
agent). Checks what it counts, not how fast this shared 2-core box is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from mlxfleet_agent.engines import bench
from tests.integration.engines.conftest import Engine

pytestmark = [pytest.mark.mlx, pytest.mark.timeout(300)]


def test_measure_counts_inputs_and_server_tokens(
    embed_engine: Engine, embedding_model: Path
) -> None:
    from tokenizers import Tokenizer

    corpus = bench.texts(64, seed=1)
    tok = Tokenizer.from_file(str(embedding_model / "tokenizer.json"))
    sent = [corpus[(i * 8) % 57 : (i * 8) % 57 + 8] for i in range(9)]  # measure's slices
    want_tokens = sum(len(tok.encode(t).ids) for batch in sent for t in batch)

    async def run() -> bench.Throughput:
        async with httpx.AsyncClient() as client:
            return await bench.measure(
                client,
                embed_engine.url,
                model=embed_engine.name,
                corpus=corpus,
                batch=8,
                concurrency=3,
                requests=9,
            )

    result = asyncio.run(run())
    assert result.inputs == 72
    assert result.tokens == want_tokens
    assert result.inputs_per_s > 0
    assert result.tokens_per_s == pytest.approx(result.tokens / result.seconds)


def test_compare_alternates_and_pairs_rounds(embed_engine: Engine) -> None:
    result = asyncio.run(
        bench.compare(
            embed_engine.url,
            embed_engine.url,
            model=None,
            rounds=2,
            batch=4,
            concurrency=2,
            requests=4,
        )
    )
    assert len(result.first) == len(result.second) == 2
    assert result.paired_ratio() > 0
    assert all(t.inputs == 16 for t in result.first + result.second)


def test_measure_raises_on_a_refused_request(embed_engine: Engine) -> None:
    async def run() -> bench.Throughput:
        async with httpx.AsyncClient() as client:
            return await bench.measure(
                client,
                embed_engine.url,
                model="not-served",
                corpus=["a"] * 8,
                batch=2,
                concurrency=1,
                requests=1,
            )

    with pytest.raises(RuntimeError, match="404"):
        asyncio.run(run())
