"""Engines on the wire: which server a slot runs (`EngineSpec`: a name from `EngineName` and that
engine's options), what engines serve (`Capability`) and what an agent can run (`EngineInfo`).

`mlx-lm` (chat, completions) is the default, so a spec without an engine is what it always was.
`mlx-embed` / `mlx-rerank` run the agent's embeddings/rerank server (options: `embed`), `vllm`
runs `vllm serve` (options: `vllm`), `command` any OpenAI-compatible server from an argv template
(options: `command`, required). The same classes validate a ModelDeployment's `spec.engine` in
the operator and a slot's spec in the agent.
May import: pydantic, the standard library, mlxfleet_common.wire.endpoints (pure). Called by:
contract.slots, the agent's engines and backends, the operator's API models and placement.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import pydantic
from pydantic import Field

from mlxfleet_agent.contract.base import StrictWire, Wire
from mlxfleet_common.wire import endpoints


class EngineName(enum.StrEnum):
    """The engines an agent knows (`spec.engine.name`)."""

    MLX_LM = "mlx-lm"
    MLX_EMBED = "mlx-embed"
    MLX_RERANK = "mlx-rerank"
    VLLM = "vllm"
    COMMAND = "command"


class Capability(enum.StrEnum):
    """An OpenAI-style endpoint family an engine answers."""

    # the families of the one endpoint table (`mlxfleet_common.wire.endpoints.ENDPOINTS`)

    CHAT = endpoints.CHAT
    COMPLETIONS = endpoints.COMPLETIONS
    EMBEDDINGS = endpoints.EMBEDDINGS
    RERANK = endpoints.RERANK


class EngineOptions(StrictWire):
    """Base of every engine's options: camelCase on the wire, unknown keys refused, frozen."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class EmbedOptions(EngineOptions):
    """Engine options of an `mlx-embed` / `mlx-rerank` ModelDeployment."""

    max_inputs: int = Field(
        default=2048,
        ge=1,
        le=100_000,
        description="Most inputs (or documents) per request (413 above).",
    )
    max_input_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens of one input (400 above; default min(8192, contextLength)).",
    )
    max_request_tokens: int = Field(
        default=300_000, ge=1, description="Most tokens in one request (413 above)."
    )
    batch_tokens: int = Field(
        default=8192, ge=16, description="Padded tokens per forward pass (sizes memory)."
    )
    batch_rows: int = Field(default=64, ge=1, description="Inputs per forward pass.")
    matryoshka: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Whether `dimensions` may shorten vectors (auto: Qwen3 embedders).",
    )


# flags the agent sets itself, or that would move the server off the agent's loopback port
RESERVED_FLAGS = frozenset(
    {
        "--host",
        "--port",
        "--uds",
        "--model",
        "--served-model-name",
        "--api-key",
        "--gpu-memory-utilization",
        "--tensor-parallel-size",
        "-tp",
        "--max-model-len",
        "--trust-remote-code",
        "--headless",
        "--config",
        "--runner",
        "--hf-overrides",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--root-path",
    }
)
# the `vllm serve` flags `extraArgs` may give (an allow-list): tuning that reads no file, imports
# nothing and logs no prompt. Everything else is refused, above all flags that name code to import
# or run (--worker-cls, --middleware, --tool-parser-plugin, --logits-processors,
# --kv-transfer-config...), files to read (--chat-template, --generation-config,
# --allowed-local-media-path, --lora-modules), models to fetch (--tokenizer,
# --speculative-config) and prompt logging (--enable-log-requests). Dashes only (no `_` forms)
# and whole names (argparse would read a prefix as the flag it abbreviates).
VLLM_EXTRA_FLAGS = frozenset(
    {
        "--seed",
        "--max-num-batched-tokens",
        "--max-num-partial-prefills",
        "--long-prefill-token-threshold",
        "--block-size",
        "--swap-space",
        "--cpu-offload-gb",
        "--kv-cache-dtype",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--scheduling-policy",
        "--max-logprobs",
        "--disable-log-stats",
        "--disable-log-requests",
        "--uvicorn-log-level",
        "--disable-custom-all-reduce",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--reasoning-parser",
        "--response-role",
        "--return-tokens-as-token-ids",
        "--enable-prompt-tokens-details",
    }
)
EXTRA_ARG_MAX_CHARS = 1024
_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


class VllmOptions(EngineOptions):
    """Engine options of a vLLM ModelDeployment (validated at admission and again here)."""

    task: Literal["generate", "embed", "rerank"] = Field(
        default="generate",
        description="generate (chat, completions), embed or rerank (--runner pooling).",
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0.0, le=1.0, description="Share of each GPU vLLM takes at start."
    )
    max_model_len: int | None = Field(default=None, ge=16, description="--max-model-len.")
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=64, description="GPUs per replica (--tensor-parallel-size)."
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = Field(
        default=None, description="--dtype."
    )
    quantization: str | None = Field(
        default=None, description="--quantization (awq, gptq, fp8, ...)."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, description="--max-num-seqs.")
    enforce_eager: bool = Field(default=False, description="--enforce-eager.")
    trust_remote_code: bool = Field(default=False, description="--trust-remote-code.")
    hf_overrides: dict[str, Any] | None = Field(
        default=None,
        max_length=64,
        description="--hf-overrides (a JSON object; Qwen3-Reranker needs one).",
    )
    extra_args: tuple[Annotated[str, Field(max_length=EXTRA_ARG_MAX_CHARS)], ...] = Field(
        default=(),
        max_length=64,
        description="More `vllm serve` flags, from an allow-list of tuning flags "
        "(docs/engines.md).",
    )

    @pydantic.field_validator("quantization")
    @classmethod
    def _quantization(cls, value: str | None) -> str | None:
        if value is not None and not _WORD.match(value):
            raise ValueError("quantization must be a method name such as awq, gptq, fp8")
        return value

    @pydantic.field_validator("extra_args")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for i, arg in enumerate(value):
            if "\x00" in arg or "\n" in arg:
                raise ValueError(f"extraArgs[{i}] contains a NUL or newline")
            if arg.startswith("-"):
                flag = arg.split("=", 1)[0]
                if not _FLAG.match(flag):
                    raise ValueError(f"extraArgs[{i}] {arg!r} is not a command-line flag")
                if flag in RESERVED_FLAGS or flag.replace("_", "-") in RESERVED_FLAGS:
                    raise ValueError(
                        f"extraArgs[{i}] sets {flag}, which the agent sets itself "
                        "(use the matching option instead)"
                    )
                if flag not in VLLM_EXTRA_FLAGS:
                    raise ValueError(
                        f"extraArgs[{i}] {flag} is not allowed; allowed: "
                        f"{', '.join(sorted(VLLM_EXTRA_FLAGS))} (a value starting with '-' "
                        "goes after '=')"
                    )
            elif i == 0:
                raise ValueError("extraArgs must start with a flag (--name)")
        return value


PLACEHOLDERS = ("model", "host", "port")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox"})
# the environment variables a `command` deployment may set (an allow-list, never a deny-list:
# PYTHONWARNINGS=ignore::antigravity.x imports a module that starts $BROWSER, which can be a Perl
# script that runs $PERL5OPT; PYTHONUSERBASE, NODE_OPTIONS, RUBYOPT, JAVA_TOOL_OPTIONS, HOME, ...
# load code too). Each of these sets a number, a switch or a device list, and no common runtime
# reads one as code, as a file to load or as a program to start. An agent may narrow it
# (`--allow-env`); a program's other settings go in its argv.
COMMAND_ENV_NAMES = frozenset(
    {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "CUDA_VISIBLE_DEVICES",
        "NO_COLOR",
    }
)
ENV_VALUE_MAX_CHARS = 1024
ARG_MAX_CHARS = 4096
TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class TemplateError(ValueError):
    """The template cannot be used; the message names the argument and what is allowed."""


def fields(arg: str) -> list[str]:
    """Placeholder names in one argument; TemplateError on a lone brace."""
    names = []
    for m in TOKEN.finditer(arg):
        text = m.group(0)
        if text in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise TemplateError(f"{arg!r} has a lone {text!r} (write {text * 2} for a literal one)")
        names.append(m.group(1))
    return names


class CommandOptions(EngineOptions):
    """Engine options of a `command` ModelDeployment."""

    argv: tuple[Annotated[str, Field(max_length=ARG_MAX_CHARS)], ...] = Field(
        min_length=1,
        max_length=256,
        description="The server's command line: {model}, {host}, {port} are filled in; no shell.",
    )
    env: dict[str, Annotated[str, Field(max_length=ENV_VALUE_MAX_CHARS)]] = Field(
        default_factory=dict,
        max_length=len(COMMAND_ENV_NAMES),
        description="Environment added for the server: only "
        + ", ".join(sorted(COMMAND_ENV_NAMES))
        + " (settings that load no code; others go in argv).",
    )
    capabilities: tuple[Capability, ...] = Field(
        min_length=1,
        max_length=4,
        description="What it serves: chat, completions, embeddings, rerank.",
    )
    memory_bytes: int = Field(
        gt=0, description="Memory it needs, in bytes (the agent cannot tell)."
    )
    stop_signal: Literal["SIGTERM", "SIGINT"] = Field(
        default="SIGTERM", description="How it stops gracefully (mlx_lm.server: SIGINT)."
    )
    stop_grace_s: float = Field(
        default=10.0, gt=0, le=300, description="Seconds before SIGKILL after the stop signal."
    )
    # what the data plane puts in a request's `model`: the served name, or the local model path
    # (mlx_lm.server loads whatever `model` names, so it needs "path")
    request_model: Literal["name", "path"] = Field(
        default="name",
        description="`model` sent to it: the served name, or the local path (mlx_lm).",
    )

    @pydantic.field_validator("argv")
    @classmethod
    def _argv(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        validate_argv(argv)
        return argv

    @pydantic.field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        check_env(env, COMMAND_ENV_NAMES)
        return env


def check_env(env: Mapping[str, str], allowed: frozenset[str] | Sequence[str]) -> None:
    """TemplateError unless every name in `env` is in `allowed` (the fleet's list, or the
    agent's narrower one) and no value holds a NUL byte."""
    for name, value in env.items():
        if name not in allowed:
            listed = ", ".join(sorted(allowed)) or "none"
            raise TemplateError(
                f"env {name!r} is not allowed (allowed: {listed}; a program's other settings "
                "go in argv)"
            )
        if "\x00" in value:
            raise TemplateError(f"env {name} contains a NUL byte")


def validate_argv(argv: Sequence[str]) -> None:
    """TemplateError unless `argv` is a usable template (see the module docstring)."""
    if not argv or not argv[0]:
        raise TemplateError("argv must name a program first")
    seen: set[str] = set()
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise TemplateError(f"argv[{i}] contains a NUL byte")
        for name in fields(arg):
            if name not in PLACEHOLDERS:
                allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise TemplateError(f"argv[{i}] uses {{{name}}}; the placeholders are {allowed}")
            if i == 0:
                raise TemplateError("argv[0] (the program) may not contain placeholders")
            seen.add(name)
    program = argv[0].rsplit("/", 1)[-1]
    if program in SHELLS:
        raise TemplateError(
            f"argv[0] is the shell {program!r}; give the server's own command line instead"
        )
    for needed in ("port", "host"):
        if needed not in seen:
            raise TemplateError(
                f"the template must pass {{{needed}}} so the server listens where the agent "
                "proxies (loopback, the slot's port)"
            )


def capabilities_of(name: EngineName, spec: EngineSpec) -> frozenset[Capability]:
    """What a slot with this engine serves (vllm: by its task; command: as declared)."""
    if name is EngineName.MLX_LM:
        return frozenset({Capability.CHAT, Capability.COMPLETIONS})
    if name is EngineName.MLX_EMBED:
        return frozenset({Capability.EMBEDDINGS})
    if name is EngineName.MLX_RERANK:
        return frozenset({Capability.RERANK})
    if name is EngineName.VLLM:
        task = (spec.vllm or VllmOptions()).task
        if task == "embed":
            return frozenset({Capability.EMBEDDINGS})
        if task == "rerank":
            return frozenset({Capability.RERANK})
        return frozenset({Capability.CHAT, Capability.COMPLETIONS})
    assert spec.command is not None
    return frozenset(spec.command.capabilities)


OPTION_KEYS: Mapping[str, frozenset[EngineName]] = {
    "embed": frozenset({EngineName.MLX_EMBED, EngineName.MLX_RERANK}),
    "vllm": frozenset({EngineName.VLLM}),
    "command": frozenset({EngineName.COMMAND}),
}


class EngineSpec(StrictWire):
    """Which engine a slot runs and that engine's options (only the matching key may be set).
    Frozen, as its options are: `capabilities` is computed once, on first use."""

    model_config = pydantic.ConfigDict(frozen=True)

    name: EngineName = Field(
        default=EngineName.MLX_LM,
        description="mlx-lm (chat, completions), mlx-embed (embeddings), mlx-rerank (rerank), "
        "vllm (an NVIDIA GPU node) or command (any OpenAI-compatible server, allow-listed on "
        "the node).",
    )
    embed: EmbedOptions | None = Field(
        default=None, description="Options of mlx-embed and mlx-rerank."
    )
    vllm: VllmOptions | None = Field(default=None, description="Options of vllm.")
    command: CommandOptions | None = Field(
        default=None, description="The command engine's template (required for command)."
    )

    @pydantic.model_validator(mode="after")
    def _options_match(self) -> EngineSpec:
        for key, engines in OPTION_KEYS.items():
            if getattr(self, key) is not None and self.name not in engines:
                allowed = " or ".join(sorted(engines))
                raise ValueError(
                    f"spec.engine.{key} is allowed only with engine {allowed}, not {self.name}"
                )
        if self.name is EngineName.COMMAND and self.command is None:
            raise ValueError(
                "spec.engine.command (argv, capabilities, memoryBytes) is required for engine "
                "command"
            )
        return self

    @functools.cached_property
    def capabilities(self) -> frozenset[Capability]:
        """What a slot with this engine serves: read per request (routing), so computed once."""
        return capabilities_of(self.name, self)


class EngineInfo(Wire):
    """One engine as an agent found it at start (GET /v1/state `engines`)."""

    name: str
    available: bool
    reason: str = ""
