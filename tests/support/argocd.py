"""Run the Argo CD health checks we ship (manifests/argocd/health-checks.yaml) in real Lua 5.1.

Argo CD runs them in gopher-lua (Lua 5.1) with the live object as the global `obj`; lupa's LuaJIT
/ Lua 5.1 runtime is the same language. Used by tests/unit/api and tests/integration/gitops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PREFIX = "resource.customizations.health.mlxfleet.io_"


def scripts() -> dict[str, str]:
    """Kind -> Lua script, from the shipped argocd-cm ConfigMap."""
    doc = yaml.safe_load((REPO / "manifests" / "argocd" / "health-checks.yaml").read_text())
    assert doc["kind"] == "ConfigMap"
    assert doc["metadata"]["name"] == "argocd-cm"
    return {key.removeprefix(PREFIX): text for key, text in doc["data"].items()}


def _to_lua(runtime: Any, value: Any) -> Any:
    """JSON -> Lua as Argo CD does it: objects and arrays become tables, nulls disappear."""
    if isinstance(value, dict):
        return runtime.table_from(
            {k: _to_lua(runtime, v) for k, v in value.items() if v is not None}
        )
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value


def health(kind: str, obj: dict[str, Any]) -> tuple[str, str]:
    """(Argo CD health status, message) of `obj` by our script for `kind`."""
    import lupa.lua51

    runtime = lupa.lua51.LuaRuntime(unpack_returned_tuples=False)
    runtime.globals().obj = _to_lua(runtime, obj)
    result = runtime.execute(scripts()[kind])
    return str(result["status"]), str(result["message"])
