"""A network namespace joined to the host by a veth pair, to partition one agent for real.

The agent runs inside (`exec_prefix`), bound to the namespace's address; the operator and other
clients stay on the host and reach it through the veth. `cut()` takes the host end of the link
down (a pulled cable: packets vanish, connections hang), `heal()` brings it back. Processes
inside keep talking to each other (the agent to its backends on 127.0.0.1, local clients to the
agent's address). Needs root (`ip netns`); everything is removed on exit.
May import: the standard library. Called by: tests/faults.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Namespace:
    name: str
    host_if: str
    inner_if: str
    host_ip: str
    inner_ip: str

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    tag = secrets.token_hex(3)
    third, fourth = secrets.randbelow(256), 4 * secrets.randbelow(64)
    net = Namespace(
        name=f"mlxf-{tag}",
        host_if=f"vh{tag}",
        inner_if=f"vn{tag}",
        host_ip=f"10.213.{third}.{fourth + 1}",
        inner_ip=f"10.213.{third}.{fourth + 2}",
    )
    _ip("netns", "add", net.name)
    try:
        _ip("link", "add", net.host_if, "type", "veth", "peer", "name", net.inner_if)
        _ip("link", "set", net.inner_if, "netns", net.name)
        _ip("addr", "add", f"{net.host_ip}/30", "dev", net.host_if)
        _ip("link", "set", net.host_if, "up")
        inside = ["netns", "exec", net.name, "ip"]
        _ip(*inside, "addr", "add", f"{net.inner_ip}/30", "dev", net.inner_if)
        _ip(*inside, "link", "set", net.inner_if, "up")
        _ip(*inside, "link", "set", "lo", "up")
        yield net
    finally:
        _ip("link", "del", net.host_if, check=False)
        _ip("netns", "del", net.name, check=False)
