"""Engines: the servers a slot can run, and the pure knowledge the agent needs to run them.

Two kinds of module live here, and the split is the import rule:
- engine processes (`embed_server`, `mlx_encoder`, `testmodels`): started as their own process
  (`python -m mlxfleet_agent.engines.embed_server ...`); they import mlx / mlx_lm.
- pure modules (`plugin`, `embed_engine`, `vllm`, `command`, `discovery`, `embed_api`,
  `merge`, `batching`, `prompts`, `vectors`, `modelinfo`) and the small I/O edges `facts` and
  `bench`: the agent process may import these; they never import mlx or mlx_lm
  (tests/unit/engines/test_import_rules.py checks it).
Called by: the agent (part 2 of issue 11 wires the plug-ins in), tests, benchmarks.
"""
