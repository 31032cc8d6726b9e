"""`mlxfleet-gateway new-key` refuses exactly the names the API server refuses (real console
script, real kube-apiserver, server-side dry runs): its Secret's name, and each namespace the key
may use. New-user test: `--name Bad_Name` printed a key and then `kubectl apply` rejected the
Secret; `--namespaces "Team A,default"` minted a key for a namespace that cannot exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlxfleet_operator.dev import controlplane

pytestmark = pytest.mark.cluster
NEW_KEY = [str(Path(sys.executable).parent / "mlxfleet-gateway"), "new-key"]
NAMES = ["app", "search-app.v2", "1app", "x" * 253, "x" * 254, "Bad_Name", "app-", "-app",
         "a..b", "app.", "UPPER", "a b"]  # fmt: skip
NAMESPACES = ["team-a", "1ns", "a" * 63, "a" * 64, "Team", "team_a", "ns-", "a.b", "x y"]


def mint(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NEW_KEY, *flags], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_secret_name_is_refused_exactly_when_the_api_server_refuses_it(
    cluster: controlplane.ControlPlane, name: str
) -> None:
    minted = mint(f"--name={name}", "--namespaces", "team-a")  # = : "-app" is a value
    # what the API server says of the same Secret with a name we let through
    probe = mint("--name", "probe", "--namespaces", "team-a")
    body = probe.stdout.replace('"name": "probe"', f'"name": "{name}"')
    server = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=body, check=False)
    assert (minted.returncode == 0) == (server.returncode == 0), (minted.stderr, server.stderr)
    if minted.returncode:
        assert minted.returncode == 2
        assert (minted.stdout, "API key" in minted.stderr) == ("", False)
        assert f"--name: {name!r}" in minted.stderr
    else:
        assert "API key (shown once" in minted.stderr


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_a_namespace_the_key_may_use_is_refused_exactly_when_it_cannot_exist(
    cluster: controlplane.ControlPlane, namespace: str
) -> None:
    minted = mint("--name", "app", "--namespaces", f"default,{namespace}")
    server = cluster.kubectl("create", "namespace", namespace, "--dry-run=server", check=False)
    assert (minted.returncode == 0) == (server.returncode == 0), (minted.stderr, server.stderr)
    if minted.returncode:
        assert f"--namespaces: {namespace!r}" in minted.stderr
        assert minted.stdout == ""
