"""A loopback TCP forwarder that can be switched off, to make the object store unreachable.

When closed it drops every connection and refuses new ones with a reset, so the real S3 server
keeps running for the other tests while this path is "down". A `tests.support.tcpproxy.Proxy`.
May import: tests.support.tcpproxy. Called by: telemetry integration tests.
"""

from __future__ import annotations

from tests.support import tcpproxy


class Gate(tcpproxy.Proxy):
    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def close_gate(self) -> None:
        """Drop every connection now and refuse new ones until `open_gate`."""
        self.reset()

    def open_gate(self) -> None:
        self.heal()
