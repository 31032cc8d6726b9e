"""The mlx-lm engine (`plugin.Engine`, `ENGINE`): its launch command, its warm-up request, how it
stops, how its processes are recognised and the vocabulary its logits have (pure).

`python -c ENTRY server --model DIR --host 127.0.0.1 --port P ...` (ENTRY: what `python -m mlx_lm`
runs, then `os._exit(0)`): decode concurrency follows the slot's maxConcurrency (what the
KV-cache estimate assumes) unless set, prompt concurrency min(decode, 8). mlx_lm ignores SIGTERM
(it stops on SIGINT), its `/health` answers before the model is loaded (so readiness is a
one-token completion), and it answers 404 to completions once its model failed to load. After
SIGINT it shuts its HTTP server down and joins its generation thread, but then the interpreter's
exit aborts in mlx (`terminate called without an active exception`, SIGABRT, -6, on every idle
stop on Linux; ml-explore/mlx#3126): no signal and no wait avoids it, so ENTRY leaves with
`os._exit` once mlx_lm's main has returned, as the agent's embed server does. ENTRY also keeps
the agent's own `GET /health` probes (every `--health-interval-s`; only the agent reaches a
backend on loopback) out of the backend's log, through the standard library's
`BaseHTTPRequestHandler.log_request` that mlx_lm's handler inherits (43k lines a day otherwise).
May import: contract, sizing, engines.plugin and the standard library. Called by: engines.registry,
slots.handles (vocab_size), tests.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxfleet_agent import contract, sizing
from mlxfleet_agent.engines import plugin

STOP_SIGNAL = signal.SIGINT
ENTRY = (
    "import os, sys\n"
    "from http.server import BaseHTTPRequestHandler as H\n"
    "log_request = H.log_request\n"  # the agent's own health probes are not logged:
    "H.log_request = lambda self, *a: None if self.path == '/health' else log_request(self, *a)\n"
    "from mlx_lm import cli\n"
    "try:\n"
    "    cli.main()\n"
    "except KeyboardInterrupt:\n"  # stopped before its server ran (loading)
    "    pass\n"
    "sys.stdout.flush()\n"
    "sys.stderr.flush()\n"
    "os._exit(0)  # skip the interpreter's exit, which aborts in mlx (ml-explore/mlx#3126)\n"
)
"""`python -m mlx_lm`, then a clean exit: what the backend runs (`-c ENTRY server ...`)."""
WARMUP_PATH = "/v1/completions"
HEALTH_PATH = "/health"  # 503 once the generation thread died (the process lives on)


def vocab_size(config: dict[str, object]) -> int | None:
    """The model's vocabulary (the logits' width) from its config.json, if it says: mlx_lm
    indexes the logits with `logit_bias` token ids unchecked, and one beyond it kills the
    process."""
    text = config.get("text_config")
    for where in (config, text if isinstance(text, dict) else {}):
        value = where.get("vocab_size")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


WARMUP_BODY: dict[str, Any] = {
    "prompt": "ping",
    "max_tokens": 1,
    "temperature": 0.0,
    "stream": False,
}


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What a backend process is started with (derived from a SlotSpec and a local model dir)."""

    model_dir: Path
    options: contract.ServerOptions
    max_concurrency: int
    python: str
    shard: contract.RankSpec | None = None  # one rank of a sharded group (see backends.ranks)


def command(spec: LaunchSpec, *, port: int) -> list[str]:
    """The backend's command line (pure; unit-tested)."""
    opts = spec.options
    decode = opts.decode_concurrency or spec.max_concurrency
    prompt = opts.prompt_concurrency or min(decode, 8)
    argv = [
        spec.python,
        "-c",
        ENTRY,
        "server",
        "--model",
        str(spec.model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        "--decode-concurrency",
        str(decode),
        "--prompt-concurrency",
        str(prompt),
    ]
    if opts.max_tokens is not None:
        argv += ["--max-tokens", str(opts.max_tokens)]
    if opts.chat_template_args:
        argv += ["--chat-template-args", json.dumps(opts.chat_template_args)]
    if opts.kv_bits is not None:
        argv += ["--kv-bits", str(opts.kv_bits)]
    if spec.shard is not None and spec.shard.mode == contract.ShardMode.PIPELINE:
        argv += ["--pipeline"]
    return argv


MARK = "mlx_lm"


def is_backend(cmdline: str) -> bool:
    """Whether a process command line is an mlx-lm backend (the orphan sweep kills only those)."""
    return MARK in cmdline


@dataclass(frozen=True, slots=True)
class MlxLm:
    """mlx-lm as a `plugin.Engine`: `command` with the slot's server options, stopped with
    SIGINT, ready once a one-token completion answers, watched through `/health`."""

    swept_mark: str | None = MARK

    def admit(self, spec: contract.EngineSpec, host: plugin.Host) -> None:
        return None  # nothing beyond being runnable

    def launch(
        self, spec: contract.SlotSpec, target: plugin.Target, host: plugin.Host
    ) -> plugin.Launch:
        model_dir = Path(target.model)
        argv = command(
            LaunchSpec(
                model_dir=model_dir,
                options=spec.server,
                max_concurrency=spec.max_concurrency,
                python=host.python,
                shard=spec.shard,
            ),
            port=target.port,
        )
        return plugin.Launch(
            argv=tuple(argv),
            stop_signal=STOP_SIGNAL,
            stop_grace_s=0.0,  # the agent's --stop-grace-s, as always
            upstream_model=str(model_dir),  # pinned: mlx_lm never loads other weights
            health_path=HEALTH_PATH,
        )

    def probes(self, spec: contract.SlotSpec, *, upstream_model: str) -> list[plugin.Probe]:
        return [plugin.Probe("POST", WARMUP_PATH, dict(WARMUP_BODY), plugin.Capability.COMPLETIONS)]

    def memory(self, spec: contract.SlotSpec, weights: plugin.Weights) -> int:
        """Weights + KV cache at the slot's context length and concurrency + overhead."""
        size, shape = weights.inspect()
        return sizing.estimate(
            weights_bytes=size,
            shape=shape,
            context_length=spec.context_length,
            max_concurrency=spec.max_concurrency,
            kv_bits=spec.server.kv_bits,
        ).total_bytes


ENGINE = MlxLm()
