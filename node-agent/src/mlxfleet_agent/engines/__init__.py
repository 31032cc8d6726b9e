"""Engines: the servers a slot can run, and the pure knowledge the agent needs to run them.

One module per engine implements `plugin.Engine` (`mlxlm`, `embed_engine` for mlx-embed and
mlx-rerank, `vllm`, `command`); `registry` maps each engine name to its engine, and is what the
agent's backends ask. Two kinds of module live here, and the split is the import rule:
- engine processes (`embed_server`, `mlx_encoder`): started as their own process
  (`python -m mlxfleet_agent.engines.embed_server ...`); they import mlx / mlx_lm.
- pure modules (`plugin`, `registry`, `mlxlm`, `embed_engine`, `vllm`, `command`, `discovery`,
  `embed_api`, `merge`, `batching`, `prompts`, `vectors`, `modelinfo`) and the small I/O edges
  `facts` and `bench`: the agent process may import these; they never import mlx or mlx_lm
  (tests/unit/engines/test_import_rules.py checks it; the plug-ins and the registry import no
  I/O library either: an import-linter contract).
Called by: the agent (backends, models.catalog, slots), tests, benchmarks.
"""
