"""The peer file server: other agents of the fleet read the models this agent holds.

Mounted on the control port under `/peer/v1/` (in front of the control API's guard, which
keeps its own token for everything else):

- `GET /peer/v1/models/{id}`: the model's files and sizes (JSON), 404 if not held here.
- `GET|HEAD /peer/v1/models/{id}/files/{path}`: one file, whole (200) or one byte range (206,
  `Range: bytes=a-b`), with `Accept-Ranges`, `Content-Length` and `Content-Range`.

Authentication: `Authorization: Bearer <fetch token>`: made by the operator for one node and one
model with this node's own peer key (`contract.credentials`), so it opens this node's copy of
that model and nothing else; or the legacy shared `--peer-token-file` (every model). Checked in
constant time: missing 401, wrong (or for another model) 403; an agent with neither serves
nothing (403). Only complete
models whose directory lies inside the models dir are served, and only regular files that
resolve (symlinks followed) inside both the model directory and the models dir; `..`, empty or
dot segments, NUL and backslashes are refused (400) before the file system is touched. A model
is pinned in the store while a response streams, so eviction never removes it mid-copy.
May import: starlette types, the standard library, peers.ranges, mlxfleet_common.wire.headers.
Called by: the composition
root (mounts it), tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from mlxfleet_agent.peers import ranges
from mlxfleet_common.wire import headers as header

PREFIX = "/peer/v1/"
CHUNK = 1024 * 1024
MODEL_ID = re.compile(r"^[0-9a-f]{16}$")
PART_SUFFIX = ".part"


class Holdings(Protocol):
    """What the server needs from the model store (`counters["peer_bytes_sent"]` is added to)."""

    counters: dict[str, float]

    def served_dir(self, model_id: str) -> Path | None:
        """The directory of a complete local copy of `model_id`, else None."""

    def pin(self, model_id: str, holder: str) -> None: ...

    def release(self, holder: str, model_id: str | None = None) -> None: ...


class Tokens(Protocol):
    """What the server needs from the node's credentials (`host.credentials.NodeKeys`)."""

    @property
    def serves_peers(self) -> bool: ...

    def fetcher(self, token: bytes, *, model_id: str) -> str | None:
        """Who may read `model_id` with `token`, else None."""


class PeerError(Exception):
    def __init__(self, status: int, message: str, *, field: str) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def safe_rel(rel: str) -> bool:
    """A relative path of plain segments: no '', '.', '..', NUL or backslash."""
    if not rel or len(rel) > 1024 or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return False
    return all(s not in ("", ".", "..") for s in rel.split("/"))


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


class PeerServer:
    """ASGI app for `/peer/v1/` (see the module docstring); `inner` gets every other path."""

    def __init__(
        self, inner: ASGIApp, *, holdings: Holdings, models_dir: Path, tokens: Tokens
    ) -> None:
        self.inner = inner
        self.holdings = holdings
        self.models_dir = Path(models_dir).resolve()
        self.tokens = tokens
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.inner(scope, receive, send)
            return
        try:
            await self._handle(scope, send)
        except PeerError as exc:
            await _error(send, exc.status, exc.message, field=exc.field)

    # ---- request handling -------------------------------------------------------------------

    def _bearer(self, scope: Scope) -> bytes:
        """The bearer token of the request (401 without one; 403 when this agent serves none)."""
        given = b""
        for name, value in scope["headers"]:
            if name == header.AUTHORIZATION:
                given = value
        if not self.tokens.serves_peers:
            raise PeerError(
                403, "this agent serves no peers (no peer key from the operator)", field="auth"
            )
        scheme, _, cred = given.partition(b" ")
        if not given or scheme.lower() != b"bearer":
            raise PeerError(401, "missing bearer peer token", field="authorization")
        return cred.strip(b" \t")

    def _authorize(self, token: bytes, model_id: str) -> None:
        if self.tokens.fetcher(token, model_id=model_id) is None:
            raise PeerError(
                403, "wrong peer token (or one for another model)", field="authorization"
            )

    async def _handle(self, scope: Scope, send: Send) -> None:
        token = self._bearer(scope)
        method = scope["method"]
        if method not in ("GET", "HEAD"):
            raise PeerError(405, f"method {method} not allowed (GET or HEAD)", field="method")
        raw = scope.get("raw_path") or scope["path"].encode()
        try:
            path = unquote(raw.decode("latin-1").split("?", 1)[0], errors="strict")
        except UnicodeDecodeError:
            raise PeerError(400, "path is not valid percent-encoded UTF-8", field="path") from None
        rest = path[len(PREFIX) :]
        parts = rest.split("/", 3)
        if len(parts) < 2 or parts[0] != "models":
            raise PeerError(404, f"no such peer route {path!r}", field="path")
        model_id = parts[1]
        if not MODEL_ID.match(model_id):
            raise PeerError(400, "model id must be 16 lowercase hex digits", field="id")
        self._authorize(token, model_id)
        if len(parts) == 2:
            await self._listing(model_id, send)
            return
        if len(parts) != 4 or parts[2] != "files" or not safe_rel(parts[3]):
            raise PeerError(
                400,
                f"path {parts[3] if len(parts) == 4 else ''!r} is not a plain relative file "
                "path (no empty, '.' or '..' segments)",
                field="path",
            )
        await self._file(scope, send, model_id, parts[3], head=method == "HEAD")

    def _model_dir(self, model_id: str) -> Path:
        found = self.holdings.served_dir(model_id)
        real = found.resolve() if found is not None else None
        if real is None or not real.is_dir() or not _inside(real, self.models_dir):
            raise PeerError(404, f"model {model_id} is not held here", field="id")
        return real

    async def _listing(self, model_id: str, send: Send) -> None:
        root = self._model_dir(model_id)

        def walk() -> list[dict[str, object]]:
            files: list[dict[str, object]] = []
            for p in sorted(root.rglob("*")):
                real = p.resolve()
                if p.name.endswith(PART_SUFFIX) or not real.is_file():
                    continue
                if not (_inside(real, root) and _inside(real, self.models_dir)):
                    continue
                rel = p.relative_to(root).as_posix()
                files.append({"path": rel, "size": real.stat().st_size})
            return files

        files = await asyncio.to_thread(walk)
        body = json.dumps({"id": model_id, "files": files}).encode()
        await _start(send, 200, [(b"content-type", b"application/json")], len(body))
        await send({"type": "http.response.body", "body": body})

    async def _file(self, scope: Scope, send: Send, model_id: str, rel: str, *, head: bool) -> None:
        root = self._model_dir(model_id)
        target = (root / rel).resolve()
        if not (_inside(target, root) and _inside(target, self.models_dir)):
            raise PeerError(404, f"{rel!r} is not a file of model {model_id}", field="path")
        if not target.is_file() or target.name.endswith(PART_SUFFIX):
            raise PeerError(404, f"{rel!r} is not a file of model {model_id}", field="path")
        size = target.stat().st_size
        span = ranges.Span(0, size - 1, size)
        status = 200
        for name, value in scope["headers"]:
            if name == b"range":
                try:
                    span = ranges.parse(value.decode("latin-1"), size)
                except ranges.RangeError as exc:
                    extra = [(b"content-range", f"bytes */{size}".encode())]
                    await _error(send, exc.status, exc.message, field="range", extra=extra)
                    return
                status = 206
        length = span.length if size else 0
        headers = [(b"content-type", b"application/octet-stream"), (b"accept-ranges", b"bytes")]
        if status == 206:
            headers.append((b"content-range", span.content_range().encode()))
        holder = f"peer-copy:{uuid.uuid4().hex[:12]}"
        self.holdings.pin(model_id, holder)
        self.active += 1
        try:
            fd = await asyncio.to_thread(os.open, target, os.O_RDONLY)
            try:
                await _start(send, status, headers, length)
                if head or length == 0:
                    await send({"type": "http.response.body", "body": b""})
                    return
                offset, left = span.start, length
                while left > 0:
                    chunk = await asyncio.to_thread(os.pread, fd, min(CHUNK, left), offset)
                    if not chunk:  # the file shrank under us: end the response short
                        break
                    offset += len(chunk)
                    left -= len(chunk)
                    self.holdings.counters["peer_bytes_sent"] = self.holdings.counters.get(
                        "peer_bytes_sent", 0.0
                    ) + len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
                if left > 0:
                    await send({"type": "http.response.body", "body": b""})
            finally:
                os.close(fd)
        finally:
            self.active -= 1
            self.holdings.release(holder, model_id)


async def _start(send: Send, status: int, headers: list[tuple[bytes, bytes]], length: int) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(length).encode())],
        }
    )


async def _error(
    send: Send,
    status: int,
    message: str,
    *,
    field: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps({"error": {"field": field, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), *(extra or [])]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await _start(send, status, headers, len(body))
    await send({"type": "http.response.body", "body": body})
