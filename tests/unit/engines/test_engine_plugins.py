"""Engine plug-in values: vllm and command lines, embed engine argv, probes, discovery (pure).

vLLM is not installed here and this machine has no GPU: these tests pin the command line to
vLLM's documented `vllm serve` flags; nothing here ran real vLLM.
"""

from __future__ import annotations

import itertools
import json
import signal
from pathlib import Path
from typing import Any

import pydantic
import pytest

from mlxfleet_agent import contract, sizing
from mlxfleet_agent.engines import (
    command,
    discovery,
    embed_engine,
    embed_server,
    plugin,
    registry,
    vllm,
)

# ---- vllm ------------------------------------------------------------------------------------


def test_vllm_command_line_defaults() -> None:
    argv = vllm.command(plugin.Target("/models/qwen", 8123, "qwen"), vllm.VllmOptions())
    assert argv == [
        "vllm",
        "serve",
        "/models/qwen",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "qwen",
        "--gpu-memory-utilization",
        "0.9",
        "--tensor-parallel-size",
        "1",
        "--disable-uvicorn-access-log",
    ]


def test_vllm_command_line_with_every_option() -> None:
    options = vllm.VllmOptions.model_validate(
        {
            "task": "rerank",
            "gpuMemoryUtilization": 0.45,
            "maxModelLen": 8192,
            "tensorParallelSize": 2,
            "dtype": "bfloat16",
            "quantization": "awq",
            "maxNumSeqs": 64,
            "enforceEager": True,
            "hfOverrides": {
                "architectures": ["Qwen3ForSequenceClassification"],
                "classifier_from_token": ["no", "yes"],
                "is_original_qwen3_reranker": True,
            },
            "extraArgs": ["--seed", "7", "--enable-prefix-caching"],
        }
    )
    argv = vllm.command(plugin.Target("/m", 9000, "rr"), options, executable="/opt/vllm")
    assert argv[:3] == ["/opt/vllm", "serve", "/m"]
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--gpu-memory-utilization"] == "0.45"
    assert pairs["--max-model-len"] == "8192"
    assert pairs["--tensor-parallel-size"] == "2"
    assert pairs["--dtype"] == "bfloat16"
    assert pairs["--quantization"] == "awq"
    assert pairs["--max-num-seqs"] == "64"
    assert pairs["--runner"] == "pooling"
    assert json.loads(pairs["--hf-overrides"])["classifier_from_token"] == ["no", "yes"]
    assert "--enforce-eager" in argv
    assert "--trust-remote-code" not in argv
    assert argv[-3:] == ["--seed", "7", "--enable-prefix-caching"]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        pytest.param({"gpuMemoryUtilization": 0}, "greater than 0", id="util-zero"),
        pytest.param({"gpuMemoryUtilization": 1.5}, "less than or equal to 1", id="util-high"),
        pytest.param({"extraArgs": ["--port", "1"]}, "sets --port", id="port"),
        pytest.param({"extraArgs": ["--host=0.0.0.0"]}, "sets --host", id="host-eq"),
        pytest.param(
            {"extraArgs": ["--served_model_name", "x"]}, "sets --served_model_name", id="underscore"
        ),
        pytest.param(
            {"extraArgs": ["--trust-remote-code"]}, "sets --trust-remote-code", id="trust"
        ),
        pytest.param({"extraArgs": ["positional"]}, "must start with a flag", id="positional"),
        pytest.param({"extraArgs": ["--a;rm -rf /"]}, "not a command-line flag", id="junk-flag"),
        # an allow-list: flags that import or run code, read files or log prompts are refused
        pytest.param({"extraArgs": ["--worker-cls", "evil.Worker"]}, "not allowed", id="worker"),
        pytest.param({"extraArgs": ["--middleware=evil.app"]}, "not allowed", id="middleware"),
        pytest.param(
            {"extraArgs": ["--tool-parser-plugin", "/tmp/x.py"]}, "not allowed", id="parser-plugin"
        ),
        pytest.param(
            {"extraArgs": ["--logits-processors", "evil.P"]}, "not allowed", id="logits-proc"
        ),
        pytest.param({"extraArgs": ["--chat-template", "/etc/x"]}, "not allowed", id="file"),
        pytest.param({"extraArgs": ["--enable-log-requests"]}, "not allowed", id="log-prompts"),
        pytest.param({"extraArgs": ["--tool-parser-p", "/x.py"]}, "not allowed", id="abbreviated"),
        pytest.param({"extraArgs": ["--max_num_batched_tokens", "8"]}, "not allowed", id="snake"),
        pytest.param({"extraArgs": ["--seed", "-1"]}, "not allowed", id="dash-value"),
        pytest.param({"extraArgs": ["--seed=" + "1" * 2000]}, "at most 1024", id="long-arg"),
        pytest.param({"quantization": "awq; rm"}, "method name", id="quantization"),
        pytest.param({"task": "chat"}, "task", id="task"),
        pytest.param({"gpuMemory": 0.5}, "Extra inputs", id="unknown"),
    ],
)
def test_vllm_options_are_validated(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=needle):
        vllm.VllmOptions.model_validate(options)


def test_vllm_refuses_a_model_that_looks_like_a_flag() -> None:
    with pytest.raises(ValueError, match="model"):
        vllm.command(plugin.Target("--help", 1, "x"), vllm.VllmOptions())


def test_vllm_launch_environment_probes_and_memory() -> None:
    options = vllm.VllmOptions(task="embed", gpu_memory_utilization=0.5, tensor_parallel_size=2)
    launch = vllm.launch(plugin.Target("/m", 9001, "emb"), options, gpu_ids=[0, 1])
    assert launch.env["HF_HUB_OFFLINE"] == "1"
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert launch.stop_signal is signal.SIGTERM
    assert launch.upstream_model == "emb"
    assert vllm.capabilities(options) == {plugin.Capability.EMBEDDINGS}
    first, second = vllm.probes(options, served_model_name="emb")
    assert (first.method, first.path, second.path) == ("GET", "/v1/models", "/v1/embeddings")
    mem = vllm.memory(options, gpu_total_bytes=80 << 30)
    assert mem.gpu_bytes == 2 * (40 << 30)


# ---- command ---------------------------------------------------------------------------------

LLAMA = [
    "llama-server",
    "-m",
    "{model}",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--alias",
    "{{x}}",
]


def _options(**kw: Any) -> command.CommandOptions:
    base: dict[str, Any] = {"argv": LLAMA, "capabilities": ["chat"], "memoryBytes": 1 << 30}
    base.update(kw)
    return command.CommandOptions.model_validate(base)


def test_command_renders_placeholders_and_literal_braces() -> None:
    argv = command.render(_options(), plugin.Target("/models/m.gguf", 8080, "m"))
    assert argv == [
        "llama-server",
        "-m",
        "/models/m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "--alias",
        "{x}",
    ]


def test_a_rendered_value_is_never_re_expanded() -> None:
    argv = command.render(_options(), plugin.Target("/m/{port}", 1, "m"))
    assert argv[2] == "/m/{port}"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(
            ["srv", "{host}", "{port}", "{model.__class__}"], "the placeholders are", id="attribute"
        ),
        pytest.param(["srv", "{host}", "{port}", "{0}"], "uses {0}", id="index"),
        pytest.param(["srv", "{host}", "{port:>5}"], "uses {port:>5}", id="format-spec"),
        pytest.param(["srv", "{host}", "{port}", "{models}"], "uses {models}", id="unknown"),
        pytest.param(["srv", "{host}", "{port", "x"], "lone", id="unbalanced"),
        pytest.param(["srv", "--port", "{port}"], "{host}", id="no-host"),
        pytest.param(["srv", "--host", "{host}"], "{port}", id="no-port"),
        pytest.param(["{model}", "{host}", "{port}"], "argv[0]", id="program-placeholder"),
        pytest.param(["/bin/sh", "-c", "srv {host} {port}"], "shell", id="shell"),
        pytest.param(["bash", "{host}", "{port}"], "shell", id="bash"),
        pytest.param([""], "program", id="empty-program"),
        pytest.param(["srv", "{host}", "{port}", "a\x00b"], "NUL", id="nul"),
    ],
)
def test_bad_templates_are_refused(argv: list[str], needle: str) -> None:
    with pytest.raises(command.TemplateError, match=None) as caught:
        command.validate_argv(argv)
    assert needle in str(caught.value)
    with pytest.raises(pydantic.ValidationError):
        _options(argv=argv)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"LD_PRELOAD": "/x.so"}, id="ld-preload"),
        pytest.param({"DYLD_INSERT_LIBRARIES": "x"}, id="dyld"),
        pytest.param({"PYTHONPATH": "/x"}, id="pythonpath"),
        pytest.param({"PATH": "/x"}, id="path"),
        pytest.param({"1BAD": "x"}, id="bad-name"),
        # what the deny-list let through (issue 22 item 2)
        pytest.param({"PYTHONWARNINGS": "ignore::antigravity.x"}, id="pythonwarnings"),
        pytest.param({"BROWSER": "/usr/bin/perlthanks"}, id="browser"),
        pytest.param({"PERL5OPT": "-Mbase;print(1)"}, id="perl5opt"),
        pytest.param({"PYTHONUSERBASE": "/tmp/u"}, id="pythonuserbase"),
        pytest.param({"NODE_OPTIONS": "--require /tmp/x.js"}, id="node-options"),
        pytest.param({"RUBYOPT": "-r/tmp/x"}, id="rubyopt"),
        pytest.param({"JAVA_TOOL_OPTIONS": "-javaagent:/x.jar"}, id="java-tool-options"),
        pytest.param({"HOME": "/tmp/h"}, id="home"),
        pytest.param({"omp_num_threads": "4"}, id="case-matters"),
        pytest.param({"OMP_NUM_THREADS": "4\x00"}, id="nul-value"),
    ],
)
def test_env_outside_the_allow_list_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(pydantic.ValidationError, match="env") as caught:
        _options(env=env)
    if "\x00" not in next(iter(env.values())):
        assert "allowed: CUDA_VISIBLE_DEVICES" in str(caught.value)  # it says what is allowed


def test_env_in_the_allow_list_is_passed() -> None:
    env = dict.fromkeys(contract.COMMAND_ENV_NAMES, "1")
    assert dict(_options(env=env).env) == env


def test_an_agent_may_narrow_the_env_allow_list() -> None:
    options = _options(env={"OMP_NUM_THREADS": "4", "HF_HUB_OFFLINE": "1"})
    target = plugin.Target("/m", 7, "x")
    with pytest.raises(command.TemplateError, match="'HF_HUB_OFFLINE' is not allowed"):
        command.launch(
            options,
            target,
            allowed_programs=["llama-server"],
            allowed_env=frozenset({"OMP_NUM_THREADS"}),
        )
    host = plugin.Host(
        python="/py",
        command_programs=("llama-server",),
        command_env=frozenset({"OMP_NUM_THREADS"}),
        runnable=frozenset({"command"}),
    )
    spec = contract.EngineSpec(name=contract.EngineName.COMMAND, command=options)
    with pytest.raises(plugin.EngineRefused, match="HF_HUB_OFFLINE"):
        registry.check(spec, host)


@pytest.mark.parametrize(
    ("engine", "serves"),
    [
        pytest.param({}, {"chat", "completions"}, id="mlx-lm"),
        pytest.param({"name": "mlx-embed"}, {"embeddings"}, id="mlx-embed"),
        pytest.param({"name": "vllm", "vllm": {"task": "rerank"}}, {"rerank"}, id="vllm-rerank"),
        pytest.param(
            {
                "name": "command",
                "command": {"argv": LLAMA, "capabilities": ["embeddings"], "memoryBytes": 1},
            },
            {"embeddings"},
            id="command",
        ),
    ],
)
def test_an_engines_capabilities_are_computed_once(
    engine: dict[str, Any], serves: set[str]
) -> None:
    """Routing reads them per request: the same set each time, not a new one per read; the spec
    is frozen so the set cannot go stale."""
    spec = contract.EngineSpec.model_validate(engine)
    assert spec.capabilities == serves
    assert spec.capabilities is spec.capabilities
    assert spec == contract.EngineSpec.model_validate(engine)  # the cache is not a field
    assert "capabilities" not in spec.model_dump()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        spec.name = contract.EngineName.MLX_RERANK  # type: ignore[misc]


def test_command_needs_capabilities_and_memory() -> None:
    with pytest.raises(pydantic.ValidationError, match="capabilities"):
        _options(capabilities=[])
    with pytest.raises(pydantic.ValidationError, match="memoryBytes"):
        command.CommandOptions.model_validate({"argv": LLAMA, "capabilities": ["chat"]})


def test_command_launch_checks_the_nodes_allow_list() -> None:
    options = _options(env={"OMP_NUM_THREADS": "4"}, stopSignal="SIGINT", requestModel="path")
    with pytest.raises(command.TemplateError, match="off on this node"):
        command.launch(options, plugin.Target("/m", 1, "x"), allowed_programs=[])
    with pytest.raises(command.TemplateError, match="not allowed"):
        command.launch(options, plugin.Target("/m", 1, "x"), allowed_programs=["vllm"])
    launch = command.launch(options, plugin.Target("/m", 7, "x"), allowed_programs=["llama-server"])
    assert launch.argv[6] == "7"
    assert launch.env == {"OMP_NUM_THREADS": "4"}
    assert launch.stop_signal is signal.SIGINT
    assert launch.upstream_model == "/m"
    assert command.memory(options).host_bytes == 1 << 30


def test_mlx_lm_server_fits_the_command_template() -> None:
    options = _options(
        argv=[
            "python",
            "-m",
            "mlx_lm",
            "server",
            "--model",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
        ],
        capabilities=["chat", "completions"],
        stopSignal="SIGINT",
        requestModel="path",
    )
    argv = command.render(options, plugin.Target("/models/tiny", 9, "tiny"))
    assert argv[4:] == ["--model", "/models/tiny", "--host", "127.0.0.1", "--port", "9"]


# ---- the embeddings engine as a plug-in ------------------------------------------------------


def test_embed_engine_argv_parses_with_the_servers_own_parser() -> None:
    options = embed_engine.EmbedOptions.model_validate(
        {"maxInputs": 100, "batchTokens": 4096, "maxInputTokens": 512}
    )
    target = plugin.Target("/models/e", 8200, "e")
    argv = embed_engine.command(target, options, python="/venv/bin/python", task="embed")
    assert argv[:3] == ["/venv/bin/python", "-m", "mlxfleet_agent.engines.embed_server"]
    args = embed_server._parser().parse_args(argv[3:])
    assert (str(args.model), args.host, args.port, args.task) == (
        "/models/e",
        "127.0.0.1",
        8200,
        "embed",
    )
    assert (args.max_inputs, args.batch_tokens, args.max_input_tokens) == (100, 4096, 512)
    assert args.served_model_name == ["e"]


def test_embed_engine_probe_and_memory() -> None:
    probe = embed_engine.probe("rerank", served_model_name="rr")
    assert probe.path == "/v1/rerank"
    assert probe.body is not None
    assert probe.body["model"] == "rr"
    options = embed_engine.EmbedOptions(batch_tokens=1000)
    fused, cpu = (
        embed_engine.memory(
            weights_bytes=10**9,
            hidden_size=1024,
            intermediate_size=3072,
            heads=16,
            max_input_tokens=8192,
            options=options,
            attention_materialized=materialized,
        )
        for materialized in (False, True)
    )
    assert fused.host_bytes == 10**9 + 1000 * (4 * 1024 + 3 * 3072) * 4 + embed_engine.RUNTIME_BYTES
    assert cpu.host_bytes - fused.host_bytes == 1000 * 16 * 1000 * 4


@pytest.mark.parametrize(
    ("cap", "answer", "ok"),
    [
        pytest.param(plugin.Capability.CHAT, {"choices": [{}]}, True, id="chat"),
        pytest.param(plugin.Capability.CHAT, {"error": {}}, False, id="chat-error"),
        pytest.param(plugin.Capability.EMBEDDINGS, {"data": [{}]}, True, id="embeddings"),
        pytest.param(plugin.Capability.EMBEDDINGS, {"data": []}, False, id="embeddings-empty"),
        pytest.param(plugin.Capability.RERANK, {"results": [{}]}, True, id="rerank"),
        pytest.param(plugin.Capability.RERANK, [], False, id="rerank-list"),
    ],
)
def test_probe_answers(cap: plugin.Capability, answer: object, ok: bool) -> None:
    probe = plugin.probe_for(cap, model="m")
    assert plugin.accepts(probe, 200, answer) is ok
    assert not plugin.accepts(probe, 503, answer)


# ---- discovery -------------------------------------------------------------------------------


def _facts(**kw: Any) -> discovery.HostFacts:
    base: dict[str, Any] = {"system": "Linux", "machine": "x86_64"}
    base.update(kw)
    return discovery.HostFacts(**base)


H100 = discovery.Gpu("NVIDIA H100 80GB HBM3", 81559 << 20)


@pytest.mark.parametrize(
    ("facts", "runnable"),
    [
        pytest.param(_facts(), [], id="bare-linux"),
        pytest.param(
            _facts(
                modules=frozenset({"mlx", "mlx_lm", "tokenizers"}),
                distributions=frozenset({"mlx-cpu"}),
            ),
            ["mlx-lm", "mlx-embed", "mlx-rerank"],
            id="linux-mlx-cpu",
        ),
        pytest.param(
            _facts(modules=frozenset({"mlx", "mlx_lm", "tokenizers"})),
            [],
            id="linux-mlx-without-backend",
        ),
        pytest.param(
            _facts(
                system="Darwin", machine="arm64", modules=frozenset({"mlx", "mlx_lm", "tokenizers"})
            ),
            ["mlx-lm", "mlx-embed", "mlx-rerank"],
            id="apple-silicon",
        ),
        pytest.param(
            _facts(modules=frozenset({"mlx", "mlx_lm"}), distributions=frozenset({"mlx-cpu"})),
            ["mlx-lm"],
            id="no-tokenizers",
        ),
        pytest.param(_facts(executables={"vllm": "/usr/bin/vllm"}), [], id="vllm-without-gpu"),
        pytest.param(_facts(nvidia_gpus=(H100,)), [], id="gpu-without-vllm"),
        pytest.param(
            _facts(executables={"vllm": "/usr/bin/vllm"}, nvidia_gpus=(H100,)),
            ["vllm"],
            id="cuda-box",
        ),
        pytest.param(
            _facts(
                executables={"llama-server": "/usr/bin/llama-server"},
                command_programs=("llama-server",),
            ),
            ["command"],
            id="allowed-command",
        ),
        pytest.param(_facts(command_programs=("llama-server",)), [], id="allowed-but-missing"),
    ],
)
def test_discovery(facts: discovery.HostFacts, runnable: list[str]) -> None:
    assert discovery.runnable(facts) == runnable
    found = discovery.engines(facts)
    assert [a.engine for a in found] == list(discovery.ENGINES)
    assert all(a.reason for a in found)


def test_discovery_reasons_name_what_is_missing() -> None:
    reasons = {a.engine: a.reason for a in discovery.engines(_facts(executables={"vllm": "/x"}))}
    assert reasons["vllm"] == "no NVIDIA GPU found (nvidia-smi lists none)"
    assert reasons["mlx-embed"] == "the mlx package is not installed"
    assert "allow-listed" in reasons["command"]


def test_parse_nvidia_smi() -> None:
    text = "NVIDIA H100 80GB HBM3, 81559\nNVIDIA A10G, 23028\n\ngarbage\nNo, GPU, x\n"
    assert discovery.parse_nvidia_smi(text) == (
        discovery.Gpu("NVIDIA H100 80GB HBM3", 81559 << 20),
        discovery.Gpu("NVIDIA A10G", 23028 << 20),
    )


# ---- the registry: one engine per name ---------------------------------------------------------


def test_every_engine_name_has_one_engine() -> None:
    assert set(registry.ENGINES) == set(contract.EngineName)


def test_the_orphan_sweep_kills_mlx_lm_and_the_embed_server_only() -> None:
    assert registry.swept_marks() == ("mlx_lm", "mlxfleet_agent.engines.embed_server")


def _slot(engine: dict[str, Any]) -> contract.SlotSpec:
    return contract.SlotSpec.model_validate(
        {"source": "file:///m/a", "servedName": "a", "maxConcurrency": 3, "engine": engine}
    )


HOST = plugin.Host(python="/py", command_programs=("llama-server",))
COMPLETION = {"prompt": "ping", "max_tokens": 1, "temperature": 0.0, "stream": False}


@pytest.mark.parametrize(
    ("engine", "argv_head", "stop", "grace", "upstream", "health", "probes"),
    [
        pytest.param(
            {"name": "mlx-lm"},
            ("/py", "-c"),
            signal.SIGINT,
            0.0,
            "/m/a",
            "/health",
            [("POST", "/v1/completions", COMPLETION, plugin.Capability.COMPLETIONS)],
            id="mlx-lm",
        ),
        pytest.param(
            {"name": "mlx-embed"},
            ("/py", "-m", "mlxfleet_agent.engines.embed_server"),
            signal.SIGTERM,
            10.0,
            "a",
            None,
            [("POST", "/v1/embeddings", {"model": "a", "input": "ping"}, "embeddings")],
            id="mlx-embed",
        ),
        pytest.param(
            {"name": "mlx-rerank"},
            ("/py", "-m", "mlxfleet_agent.engines.embed_server"),
            signal.SIGTERM,
            10.0,
            "a",
            None,
            [
                (
                    "POST",
                    "/v1/rerank",
                    {"model": "a", "query": "ping", "documents": ["ping"]},
                    "rerank",
                )
            ],
            id="mlx-rerank",
        ),
        pytest.param(
            {"name": "vllm"},
            ("vllm", "serve", "/m/a"),
            signal.SIGTERM,
            30.0,
            "a",
            None,
            [
                ("GET", "/v1/models", None, "models"),
                (
                    "POST",
                    "/v1/completions",
                    {"model": "a", "prompt": "ping", "max_tokens": 1, "temperature": 0.0},
                    "completions",
                ),
            ],
            id="vllm",
        ),
        pytest.param(
            {
                "name": "command",
                "command": {
                    "argv": LLAMA,
                    "capabilities": ["embeddings", "chat"],
                    "memoryBytes": 1 << 30,
                },
            },
            ("llama-server", "-m", "/m/a"),
            signal.SIGTERM,
            10.0,
            "a",
            None,
            [
                (
                    "POST",
                    "/v1/chat/completions",
                    {
                        "model": "a",
                        "messages": [{"role": "user", "content": "ping"}],
                        "max_tokens": 1,
                        "temperature": 0.0,
                    },
                    "chat",
                )
            ],
            id="command",
        ),
    ],
)
def test_the_registry_launches_and_probes_each_engine(
    engine: dict[str, Any],
    argv_head: tuple[str, ...],
    stop: signal.Signals,
    grace: float,
    upstream: str,
    health: str | None,
    probes: list[tuple[str, str, Any, str]],
) -> None:
    spec = _slot(engine)
    made = registry.launch(spec, Path("/m/a"), 8123, HOST)
    assert made.argv[: len(argv_head)] == argv_head
    assert "8123" in made.argv
    assert (made.stop_signal, made.stop_grace_s) == (stop, grace)
    assert (made.upstream_model, made.health_path) == (upstream, health)
    got = registry.probes(spec, upstream_model=made.upstream_model)
    assert [(p.method, p.path, p.body, p.expect) for p in got] == probes


def test_the_registry_refuses_an_engine_the_node_cannot_run() -> None:
    host = plugin.Host(python="/py", reasons=(("vllm", "no NVIDIA GPU found"),))
    with pytest.raises(
        plugin.EngineRefused, match="engine vllm cannot run on this node: no NVIDIA"
    ):
        registry.check(contract.EngineSpec(name=contract.EngineName.VLLM), host)
    registry.check(contract.EngineSpec(), host)  # mlx-lm: runnable by default


class _Weights:
    """A model directory that counts its reads (an engine reads it only when it needs to)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self.reads = 0

    def inspect(self) -> tuple[int, contract.ModelShape]:
        self.reads += 1
        shape = sizing.shape_from_config(self._config)
        return 100 << 20, shape

    def config(self) -> dict[str, Any]:
        self.reads += 1
        return self._config


QWEN = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "torch_dtype": "bfloat16",
}


def test_the_registry_sizes_each_engine_from_what_it_needs() -> None:
    weights = _Weights(QWEN)
    mlx = _slot({"name": "mlx-lm"})
    size, shape = weights.inspect()
    expected = sizing.estimate(
        weights_bytes=size,
        shape=shape,
        context_length=mlx.context_length,
        max_concurrency=3,
        kv_bits=None,
    ).total_bytes
    assert registry.memory(mlx, weights) == expected
    embed = _slot({"name": "mlx-embed"})
    assert registry.memory(embed, weights) == embed_engine.slot_memory(embed, 100 << 20, QWEN)
    weights.reads = 0
    assert registry.memory(_slot({"name": "vllm"}), weights) == 2 << 30  # its process
    declared = {"argv": LLAMA, "capabilities": ["chat"], "memoryBytes": 3 << 30}
    assert registry.memory(_slot({"name": "command", "command": declared}), weights) == 3 << 30
    assert weights.reads == 0  # neither reads the model directory


def test_an_embedding_model_without_its_sizes_is_refused() -> None:
    with pytest.raises(sizing.UnknownModelSize, match="intermediate_size"):
        registry.memory(_slot({"name": "mlx-rerank"}), _Weights({**QWEN, "intermediate_size": 0}))
