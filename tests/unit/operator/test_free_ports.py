"""dev.processes.free_ports never hands out a port twice in one interpreter.

A port is only free until its user binds it; kopf binds its liveness port seconds after the
operator starts, and CI once handed that port to an agent started in the meantime (the test
then talked to kopf and got 404 from `/v1/state`).
"""

from __future__ import annotations

from mlxfleet_operator.dev import processes


def test_ports_are_never_repeated_across_calls() -> None:
    seen: list[int] = []
    for _ in range(400):  # without the record, the kernel repeats a freed port within ~200 draws
        seen += processes.free_ports(2)
    assert len(seen) == len(set(seen)) == 800


def test_ports_are_loopback_bindable() -> None:
    import socket

    (port,) = processes.free_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
