"""The dev control plane's command lines: loopback only, no profiling unless a benchmark asks."""

from __future__ import annotations

from pathlib import Path

from mlxfleet_operator.dev import commands


def _argv(*, profiling: bool = False) -> list[str]:
    return commands.apiserver(
        binary=Path("/b/kube-apiserver"), etcd_port=1, port=2, pki=Path("/p"), profiling=profiling
    )


def test_the_api_server_serves_no_profile_unless_asked() -> None:
    plain, profiled = _argv(), _argv(profiling=True)
    assert "--profiling=false" in plain
    assert "--profiling=true" not in plain
    assert "--profiling=true" in profiled
    assert "--profiling=false" not in profiled
    # otherwise the same server: loopback, RBAC
    same = [a for a in plain if "profiling" not in a]
    assert same == [a for a in profiled if "profiling" not in a]
    assert "--bind-address=127.0.0.1" in profiled
    assert "--authorization-mode=RBAC" in profiled
