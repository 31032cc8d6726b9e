"""Development and test tooling, not part of the running agent: tiny models generated locally
for tests, the demo and benchmarks (no hub access).

`devmodels` writes tiny llama chat models (mlx-lm); `testmodels` the tiny Qwen3 embedding and
reranker checkpoints of the mlx-embed / mlx-rerank engines. Both keep their heavy imports (mlx,
mlx_lm, tokenizers) inside functions, so importing them is cheap.
May import: engines (prompts), mlx, mlx_lm, tokenizers, numpy, the standard library. Called by:
the `mlxfleet-agent make-model` command (cli, the only agent module that imports this package:
an import-linter contract), tests/support/models.py, tests, benchmarks, the operator's demo (through
the command).
"""
