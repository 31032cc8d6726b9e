"""A TCP forwarder that can freeze a transfer at a chosen byte count: a network link that stops
mid-stream, deterministically (the peer-transfer resume test cuts a copy at a known point).

`Gate(host, port, hold_after=N)` listens on a free loopback port and forwards every connection to
(host, port); bytes flowing back (server -> client) pass until N have gone through in total, then
that direction stops (the connection stays open, nothing more arrives) until `release()`.
`sent` counts the server -> client bytes forwarded so far; `held` is set once the gate froze.
May import: the standard library. Called by: integration tests.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Gate:
    """See the module docstring."""

    def __init__(self, host: str, port: int, *, hold_after: int | None = None) -> None:
        self.target = (host, port)
        self.hold_after = hold_after
        self.sent = 0
        self.held = threading.Event()
        self._open = threading.Event()
        if hold_after is None:
            self._open.set()
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def release(self) -> None:
        """Forward everything from now on (no more freezing)."""
        self.hold_after = None
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self._open.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _allowance(self, want: int) -> int:
        """How many of `want` downstream bytes may pass now (blocks while frozen)."""
        while True:
            with self._lock:
                if self.hold_after is None:
                    return want
                room = self.hold_after - self.sent
                if room > 0:
                    return min(want, room)
                self.held.set()
            self._open.wait()
            if self._closed:
                return 0

    def _pipe(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        try:
            while not self._closed:
                data = src.recv(1 << 20)
                if not data:
                    break
                view = memoryview(data)
                while view:
                    n = self._allowance(len(view)) if downstream else len(view)
                    if n == 0:
                        return
                    dst.sendall(view[:n])
                    view = view[n:]
                    if downstream:
                        with self._lock:
                            self.sent += n
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
