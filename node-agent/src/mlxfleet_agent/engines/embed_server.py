"""The embeddings/rerank engine: an OpenAI-compatible HTTP server for one model, one process.

    python -m mlxfleet_agent.engines.embed_server --model DIR --host 127.0.0.1 --port P
        [--task auto|embed|rerank] [--served-model-name NAME ...] [limits, batching flags]

It loads the model first and only then listens, so any answer means ready (unlike mlx_lm's
static /health). Routes: `POST /v1/embeddings` (embed models), `POST /v1/rerank` (also
`/rerank`, `/v2/rerank`; rerank models), `GET /v1/models`, `GET /health`. All model work runs
on one worker thread; requests that arrive together are merged into shared padded batches
(`merge.Batcher`), so many small concurrent requests cost about what one large one does. It
stops on SIGINT or SIGTERM (uvicorn's graceful shutdown).
May import: mlx (through mlx_encoder), starlette, uvicorn, engines.*. Called by: the agent's
engine plug-in (part 2 of issue 11), tests, the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxfleet_agent.engines import embed_api, merge, vectors

DEFAULT_MAX_INPUTS = 2048  # OpenAI's own per-request limit
DEFAULT_MAX_INPUT_TOKENS = 8192
DEFAULT_MAX_REQUEST_TOKENS = 300_000
DEFAULT_BATCH_TOKENS = 8192
DEFAULT_BATCH_ROWS = 64
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_PENDING = 256  # requests waiting for the worker; more answer 503


@dataclass
class Runtime:
    """Everything a request handler needs (built by `main`, or by tests around an Encoder)."""

    encoder: Any  # mlx_encoder.Encoder (Any: the agent-side type checker never imports mlx)
    batcher: merge.Batcher
    executor: ThreadPoolExecutor
    limits: embed_api.Limits
    facts: embed_api.ModelFacts
    max_body_bytes: int
    created: int

    async def tokenize(self, fn: Callable[[], list[list[int]]]) -> list[list[int]]:
        """Tokenise off the event loop and off the model thread (the tokenizer is thread-safe)."""
        return await asyncio.to_thread(fn)


def _error(exc: embed_api.ApiError) -> JSONResponse:
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    too_big = embed_api.ApiError(
        413, f"request body is larger than {limit} bytes", code="request_too_large"
    )
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _wrong_task(rt: Runtime, wanted: str) -> embed_api.ApiError:
    embed = rt.encoder.info.task == "embed"
    what, served = (
        ("an embedding model", "/v1/embeddings") if embed else ("a reranker", "/v1/rerank")
    )
    return embed_api.ApiError(
        400,
        f"model `{rt.facts.names[0]}` is {what}; it does not serve {wanted} (use {served})",
        code="unsupported_endpoint",
    )


async def _submit(rt: Runtime, seqs: list[list[int]]) -> list[Any]:
    try:
        return await rt.batcher.submit(seqs)
    except merge.Busy:
        raise embed_api.ApiError(
            503, "the engine is busy; retry shortly", type_="server_error", code="busy"
        ) from None
    except Exception as exc:  # the forward pass failed (logged by the batcher)
        raise embed_api.ApiError(
            500, f"the model failed on this request: {exc}", type_="server_error"
        ) from None


async def embeddings(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    try:
        if rt.encoder.info.task != "embed":
            raise _wrong_task(rt, "/v1/embeddings")
        body = embed_api.load_json(await _read_body(request, rt.max_body_bytes))
        job = embed_api.parse_embeddings(body, limits=rt.limits, facts=rt.facts)
        if job.texts is not None:
            texts = job.texts
            seqs = await rt.tokenize(lambda: rt.encoder.embedding_ids(texts))
        else:
            seqs = [list(ids) for ids in job.token_ids or ()]
        tokens = embed_api.check_lengths([len(s) for s in seqs], limits=rt.limits, field="input")
        pooled = np.stack(await _submit(rt, seqs))
        matrix = vectors.finish(pooled, dimensions=job.dimensions, normalize=True)
        return JSONResponse(embed_api.embeddings_answer(job, matrix, tokens=tokens))
    except embed_api.ApiError as exc:
        return _error(exc)


async def rerank(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    try:
        if rt.encoder.info.task != "rerank":
            raise _wrong_task(rt, request.url.path)
        body = embed_api.load_json(await _read_body(request, rt.max_body_bytes))
        job = embed_api.parse_rerank(body, limits=rt.limits, facts=rt.facts)
        seqs = await rt.tokenize(
            lambda: rt.encoder.rerank_ids(job.query, job.documents, instruction=job.instruction)
        )
        tokens = embed_api.check_lengths(
            [len(s) for s in seqs], limits=rt.limits, field="documents"
        )
        scores = await _submit(rt, seqs)
        answer = embed_api.rerank_answer(
            job, scores, tokens=tokens, request_id=f"rerank-{uuid.uuid4().hex}"
        )
        return JSONResponse(answer)
    except embed_api.ApiError as exc:
        return _error(exc)


async def models(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    item = {
        "id": rt.facts.names[0],
        "object": "model",
        "created": rt.created,
        "owned_by": "mlxfleet",
        "task": rt.encoder.info.task,
    }
    return JSONResponse({"object": "list", "data": [item]})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "task": request.app.state.runtime.encoder.info.task})


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(embed_api.ApiError(404, f"no route {request.method} {request.url.path}"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return _error(embed_api.ApiError(405, f"{request.method} is not allowed on {request.url.path}"))


def build_app(runtime: Runtime) -> Starlette:
    routes = [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/embeddings", embeddings, methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST"]),
        Route("/rerank", rerank, methods=["POST"]),
        Route("/v2/rerank", rerank, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime.batcher.start()
        yield
        await runtime.batcher.stop()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_allowed},
    )
    app.state.runtime = runtime
    return app


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mlxfleet_agent.engines.embed_server", description=__doc__.split("\n")[0]
    )
    p.add_argument("--model", type=Path, required=True, help="local model directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--task", choices=("auto", "embed", "rerank"), default="auto")
    p.add_argument(
        "--served-model-name",
        action="append",
        default=None,
        help="name clients use in `model` (repeatable; default: the directory name)",
    )
    p.add_argument("--max-inputs", type=int, default=DEFAULT_MAX_INPUTS)
    p.add_argument(
        "--max-input-tokens",
        type=int,
        default=None,
        help=f"per input (default: min({DEFAULT_MAX_INPUT_TOKENS}, the model's context))",
    )
    p.add_argument("--max-request-tokens", type=int, default=DEFAULT_MAX_REQUEST_TOKENS)
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        help="padded tokens per forward pass",
    )
    p.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    p.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING)
    p.add_argument(
        "--matryoshka",
        choices=("auto", "on", "off"),
        default="auto",
        help="accept `dimensions` (auto: on for qwen3 embedding models)",
    )
    p.add_argument(
        "--end-token",
        default="<|endoftext|>",
        help="token last-token pooling needs at the end of each input ('' for none)",
    )
    p.add_argument("--log-level", default="warning")
    return p


def _positive(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    from mlxfleet_agent.engines import mlx_encoder, modelinfo

    p = _parser()
    args = p.parse_args(argv)
    _positive(
        p,
        args,
        "max_inputs",
        "max_input_tokens",
        "max_request_tokens",
        "batch_tokens",
        "batch_rows",
        "max_body_bytes",
        "max_pending",
    )
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s"
    )
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlx")
    shape = mlx_encoder.BatchShape(max_tokens=args.batch_tokens, max_rows=args.batch_rows)
    mrl = {"auto": None, "on": True, "off": False}[args.matryoshka]
    try:
        encoder = executor.submit(
            mlx_encoder.Encoder.load,
            args.model,
            task=args.task,
            shape=shape,
            end_token=args.end_token or None,
            matryoshka=mrl,
        ).result()
        executor.submit(mlx_encoder.warm, encoder).result()
    except (modelinfo.ModelDirError, OSError, ValueError) as exc:
        print(f"embed_server: cannot serve {args.model}: {exc}", flush=True)
        executor.shutdown(wait=True)
        return 2
    info = encoder.info
    max_input = args.max_input_tokens or min(DEFAULT_MAX_INPUT_TOKENS, info.max_positions)
    names = (*(args.served_model_name or [args.model.name]), str(args.model))
    runtime = Runtime(
        encoder=encoder,
        batcher=merge.Batcher(
            encoder.run,
            executor=executor,
            max_tokens=max(args.batch_tokens * 4, max_input),
            max_pending=args.max_pending,
        ),
        executor=executor,
        limits=embed_api.Limits(args.max_inputs, max_input, args.max_request_tokens),
        facts=embed_api.ModelFacts(names, info.vocab_size, info.hidden_size, info.matryoshka),
        max_body_bytes=args.max_body_bytes,
        created=int(time.time()),
    )
    config = uvicorn.Config(
        build_app(runtime),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    print(
        f"embed_server: {info.task} model {names[0]} loaded; listening on {args.host}:{args.port}",
        flush=True,
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal with the
    # handlers it found: make those a clean exit, so a stopped engine reports status 0
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    try:
        uvicorn.Server(config).run()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return 0


def _leave(code: int) -> NoReturn:
    """Exit without C++ static destructors: at interpreter exit mlx sometimes aborts
    ("terminate called without an active exception", status -6, about 1 stop in 16 here) after
    a thread that used it is gone. Everything worth flushing is flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _leave(main())
