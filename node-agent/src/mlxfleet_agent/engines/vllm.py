"""The vLLM engine: `vllm serve` command line, environment, readiness and memory (pure).

    vllm serve MODEL --host 127.0.0.1 --port P --served-model-name NAME
        --gpu-memory-utilization F [--max-model-len N] [--tensor-parallel-size N] [--dtype D]
        [--quantization Q] [--max-num-seqs N] [--enforce-eager] [--runner pooling]
        [--hf-overrides JSON] [--trust-remote-code] --disable-uvicorn-access-log [EXTRA...]

Flags are vLLM's documented `vllm serve` arguments (docs.vllm.ai, cli/serve, 0.1x-0.3x). Pooling
models (embeddings, rerank) run with `--runner pooling`; Qwen3-Reranker also needs the
`hfOverrides` its vLLM recipe gives (architectures Qwen3ForSequenceClassification,
classifier_from_token ["no", "yes"], is_original_qwen3_reranker true). The agent owns host,
port, model and served name, so `extraArgs` may not set them. The server never reaches a hub
(HF_HUB_OFFLINE=1) and sends no usage statistics. Memory: vLLM takes
`gpu_memory_utilization` of each GPU it uses at start, whatever the model's size.
Not run against real vLLM here (no GPU on this machine); tests check the builders and a
stand-in server.
May import: contract, engines.plugin, the standard library. Called by: engines.registry
(`ENGINE`, the `plugin.Engine`), tests.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from mlxfleet_agent import contract
from mlxfleet_agent.contract.engines import RESERVED_FLAGS, VllmOptions
from mlxfleet_agent.engines import plugin

__all__ = [
    "ENGINE",
    "RESERVED_FLAGS",
    "VllmOptions",
    "capabilities",
    "command",
    "environment",
    "launch",
    "memory",
    "probes",
]

STOP_GRACE_S = 30.0  # vLLM frees GPU memory and its engine-core children on SIGTERM


def command(target: plugin.Target, options: VllmOptions, *, executable: str = "vllm") -> list[str]:
    """The argv of `vllm serve` for one slot (no shell; every value is its own argument)."""
    if not target.model or target.model.startswith("-"):
        raise ValueError(f"model must be a path or repository id, got {target.model!r}")
    if not 1 <= target.port <= 65535:
        raise ValueError(f"port must be 1..65535, got {target.port}")
    argv = [
        executable, "serve", target.model,
        "--host", target.host,
        "--port", str(target.port),
        "--served-model-name", target.served_model_name,
        "--gpu-memory-utilization", f"{options.gpu_memory_utilization:g}",
        "--tensor-parallel-size", str(options.tensor_parallel_size),
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if options.max_model_len is not None:
        argv += ["--max-model-len", str(options.max_model_len)]
    if options.dtype is not None:
        argv += ["--dtype", options.dtype]
    if options.quantization is not None:
        argv += ["--quantization", options.quantization]
    if options.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(options.max_num_seqs)]
    if options.enforce_eager:
        argv.append("--enforce-eager")
    if options.task != "generate":
        argv += ["--runner", "pooling"]
    if options.hf_overrides:
        argv += ["--hf-overrides", json.dumps(options.hf_overrides, sort_keys=True)]
    if options.trust_remote_code:
        argv.append("--trust-remote-code")
    return argv + list(options.extra_args)


def environment(*, gpu_ids: Sequence[int] | None = None) -> dict[str, str]:
    """Variables added to the agent's environment for a vLLM process."""
    env = {
        "HF_HUB_OFFLINE": "1",  # weights come from the agent's store, never from a hub
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if gpu_ids is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_ids)
    return env


def capabilities(options: VllmOptions) -> frozenset[plugin.Capability]:
    if options.task == "embed":
        return frozenset({plugin.Capability.EMBEDDINGS})
    if options.task == "rerank":
        return frozenset({plugin.Capability.RERANK})
    return frozenset({plugin.Capability.CHAT, plugin.Capability.COMPLETIONS})


def launch(
    target: plugin.Target,
    options: VllmOptions,
    *,
    gpu_ids: Sequence[int] | None = None,
    executable: str = "vllm",
) -> plugin.Launch:
    return plugin.Launch(
        argv=tuple(command(target, options, executable=executable)),
        env=environment(gpu_ids=gpu_ids),
        stop_signal=signal.SIGTERM,
        stop_grace_s=STOP_GRACE_S,
        upstream_model=target.served_model_name,
    )


def probes(options: VllmOptions, *, served_model_name: str) -> list[plugin.Probe]:
    """Readiness in order: the name is listed, then one real request of its main capability."""
    listed = plugin.Probe("GET", "/v1/models", None, "models")
    main = {
        "generate": plugin.Capability.COMPLETIONS,
        "embed": plugin.Capability.EMBEDDINGS,
        "rerank": plugin.Capability.RERANK,
    }[options.task]
    return [listed, plugin.probe_for(main, model=served_model_name)]


@dataclass(frozen=True, slots=True)
class Vllm:
    """vLLM as a `plugin.Engine` (`vllm serve`; not swept: its command line is arbitrary)."""

    swept_mark: str | None = None

    def admit(self, spec: contract.EngineSpec, host: plugin.Host) -> None:
        return None  # nothing beyond being runnable (a GPU and `vllm` on PATH: discovery)

    def launch(
        self, spec: contract.SlotSpec, target: plugin.Target, host: plugin.Host
    ) -> plugin.Launch:
        return launch(target, spec.engine.vllm or VllmOptions())

    def probes(self, spec: contract.SlotSpec, *, upstream_model: str) -> list[plugin.Probe]:
        return probes(spec.engine.vllm or VllmOptions(), served_model_name=upstream_model)

    def memory(self, spec: contract.SlotSpec, weights: plugin.Weights) -> int:
        """Host memory is the server process (GPU memory is vLLM's own share)."""
        return memory(spec.engine.vllm or VllmOptions(), gpu_total_bytes=0).host_bytes


ENGINE = Vllm()


def memory(
    options: VllmOptions, *, gpu_total_bytes: int, host_bytes: int = 2 << 30
) -> plugin.Memory:
    """vLLM preallocates `gpu_memory_utilization` of each GPU it uses (weights + KV cache).

    `gpu_total_bytes` is one GPU's memory (nvidia-smi); the slot holds that share on each of
    its `tensor_parallel_size` GPUs. Host memory is the server process itself (a flat reserve).
    """
    per_gpu = int(options.gpu_memory_utilization * gpu_total_bytes)
    return plugin.Memory(
        host_bytes=host_bytes,
        gpu_bytes=per_gpu * options.tensor_parallel_size,
        basis=(
            f"{options.gpu_memory_utilization:g} x {gpu_total_bytes} B per GPU x "
            f"{options.tensor_parallel_size} GPU(s)"
        ),
    )
