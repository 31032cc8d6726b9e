"""The agent process never imports mlx: the engine modules it may use must not pull it in.

Runs a fresh interpreter (this test process has mlx loaded by other tests) and lists the
modules each import brought. `embed_server` is the engine process itself, but importing it (for
its argument parser) must stay free of mlx too: mlx loads only inside `main`. The development
tooling (`dev`: tiny models) keeps mlx inside its functions too, so `mlxfleet-agent make-model`
and the test fixtures import it cheaply.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

AGENT_SIDE = [
    "plugin",
    "embed_engine",
    "vllm",
    "command",
    "discovery",
    "facts",
    "bench",
    "embed_api",
    "batching",
    "prompts",
    "vectors",
    "modelinfo",
    "embed_server",
    "mlxlm",
    "registry",
]
MODULES = [f"mlxfleet_agent.engines.{name}" for name in AGENT_SIDE] + [
    "mlxfleet_agent.dev.devmodels",
    "mlxfleet_agent.dev.testmodels",
]
PROBE = """
import importlib, json, sys
before = set(sys.modules)
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("module", MODULES)
def test_agent_side_engine_modules_do_not_import_mlx(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    loaded = json.loads(done.stdout)
    heavy = [m for m in loaded if m.split(".")[0] in {"mlx", "mlx_lm", "transformers", "torch"}]
    assert heavy == []
