"""A loopback TCP proxy that can cut, black-hole or slow one path, for fault tests.

`open`: bytes flow. `reset()`: every connection is dropped with a reset and new ones are refused
(a process that died, a firewall that rejects). `blackhole()`: connections stay open but nothing
moves either way and new ones are accepted and ignored (a pulled cable: clients see timeouts, not
errors). `heal()` opens it again (connections held in a black hole are then closed). `delay(s, n)`:
the next `n` requests (client-to-target chunks) are held `s` seconds before they are forwarded.
Only the path through this proxy is affected: the target keeps running for everyone else.
`accepted` counts the connections made to it (whatever the mode): who reached the target.
May import: the standard library.
Called by: tests/faults, tests/integration/election, the telemetry tests (netgate).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

LINGER_RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends RST


class Proxy:
    def __init__(
        self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self.mode = "open"
        self._changed = threading.Condition()
        self._delays: list[float] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(128)
        self._sock.settimeout(0.2)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.delayed = 0  # requests held so far
        self.accepted = 0  # connections made to the proxy so far
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _set(self, mode: str) -> None:
        with self._changed:
            self.mode = mode
            self._changed.notify_all()

    def reset(self) -> None:
        self._set("reset")
        self._drop_all()

    def blackhole(self) -> None:
        self._set("blackhole")

    def heal(self) -> None:
        was = self.mode
        self._set("open")
        if was == "blackhole":
            self._drop_all()

    def delay(self, seconds: float, count: int = 1) -> None:
        with self._lock:
            self._delays.extend([seconds] * count)

    def stop(self) -> None:
        self._stop.set()
        self._set("reset")
        self._drop_all()
        self._sock.close()

    def _drop_all(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            _hard_close(s)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.mode == "reset":
                _hard_close(client)
                continue
            if self.mode == "blackhole":
                with self._lock:
                    self._conns.append(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _hard_close(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for src, dst, ask in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(src, dst, ask), daemon=True).start()

    def _hold(self) -> bool:
        """Wait while black-holed; False when the connection must go (reset, or healed)."""
        with self._changed:
            if self.mode == "open":
                return True
            if self.mode == "reset":
                return False
            self._changed.wait_for(lambda: self.mode != "blackhole" or self._stop.is_set())
            return False

    def _pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or not self._hold():
                    break
                if requests:
                    with self._lock:
                        pause = self._delays.pop(0) if self._delays else 0.0
                        self.delayed += 1 if pause else 0
                    if pause:
                        time.sleep(pause)
                    if not self._hold():
                        break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _hard_close(s)


def _hard_close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
    with contextlib.suppress(OSError):
        s.close()
