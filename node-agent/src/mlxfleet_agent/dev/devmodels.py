"""Tiny llama models generated locally, for tests, the demo and benchmarks (no hub access).

A model is a directory that `python -m mlx_lm generate|server --model DIR` loads: config.json,
model.safetensors (weights of `mlx_lm.models.llama.Model`, float16), tokenizer.json (a byte-level
BPE trained with `tokenizers` on a few sentences), tokenizer_config.json (with a ChatML
chat_template). Different seeds give different weights; the same seed gives the same bytes.

The weights are random but shaped so generation runs to `max_tokens`: every embedding carries a
constant positive "bias" coordinate, and the untied lm_head gives EOS, the special tokens and any
token that does not decode to printable ASCII a large negative weight on that coordinate, so the
model never stops early and its text is readable (gibberish, but ASCII).

May import: mlx, mlx_lm, tokenizers and the standard library (heavy imports happen inside the
functions so `import mlxfleet_agent.dev.devmodels` stays cheap). Called by: tests/support/models.py,
the agent CLI (`mlxfleet-agent make-model`), demo and benchmark scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

MARKER_KEY = "mlxfleet_devmodel"
EOS_TOKEN = "<|im_end|>"  # noqa: S105 (a token, not a secret)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", EOS_TOKEN)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "A fleet of small computers serves language models to the people who need them.",
    "system user assistant: hello, how are you today? I am fine, thank you.",
    "Swap the model without dropping a single request; drain, switch, and stop.",
    "Memory is unified: weights, the key value cache and the runtime share it.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation , . ; : ! ? ' \" ( ) [ ] { } - + = / * & % $ # @",
    "Once upon a time there was a tiny model that could only write nonsense, but wrote it quickly.",
)
_BIAS_PENALTY = 30.0  # lm_head weight on the bias coordinate for tokens the model must not emit


def _train_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    return tok


def _allowed_ids(tok: Any) -> list[int]:
    """Token ids whose text is non-empty printable ASCII (the only ones the model may emit)."""
    specials = {tok.token_to_id(t) for t in SPECIAL_TOKENS}
    allowed = []
    for tid in range(tok.get_vocab_size()):
        if tid in specials:
            continue
        text = tok.decode([tid])
        if text and all(32 <= ord(c) < 127 for c in text):
            allowed.append(tid)
    return allowed


def _config(
    *, vocab_size: int, hidden_size: int, num_layers: int, heads: int, kv_heads: int, eos: int
) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden_size // heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "bos_token_id": None,
        "eos_token_id": eos,
    }


def _weights(config: dict[str, Any], *, seed: int, allowed: list[int]) -> dict[str, Any]:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    args: Any = llama.ModelArgs
    model = llama.Model(args.from_dict(config))
    flat: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    shapes = sorted((name, p.shape) for name, p in flat)
    key = mx.random.key(seed)
    keys = mx.random.split(key, len(shapes))
    hidden = config["hidden_size"]
    out: dict[str, Any] = {}
    for (name, shape), k in zip(shapes, keys, strict=True):
        if name.endswith("norm.weight"):
            w = mx.ones(shape)
        elif name == "model.embed_tokens.weight":
            w = mx.random.normal(shape, key=k)
            w[:, 0] = 3.0  # the bias coordinate: dominates its own channel, always positive
        elif name == "lm_head.weight":
            w = mx.random.normal(shape, key=k) * (1.0 / hidden**0.5) * 4.0
            bias = mx.full((shape[0],), -_BIAS_PENALTY)
            bias[mx.array(allowed)] = 0.0
            w[:, 0] = bias
        else:
            # attention/MLP projections: small, so the residual keeps the bias coordinate positive
            w = mx.random.normal(shape, key=k) * (0.5 / shape[-1] ** 0.5)
        out[name] = w.astype(mx.float16)
    return out


def _tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32768,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_tokenizer(out_dir: Path, *, vocab_size: int = 512) -> Any:
    """The dev models' tokenizer files (tokenizer.json, tokenizer_config.json with the chat
    template, special_tokens_map.json) in `out_dir`, without weights (no mlx: unit tests of
    prompt counting use them); returns the `tokenizers.Tokenizer`."""
    tok = _train_tokenizer(vocab_size)
    tok.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", _tokenizer_config())
    _write_json(
        out_dir / "special_tokens_map.json",
        {"eos_token": EOS_TOKEN, "pad_token": SPECIAL_TOKENS[0]},
    )
    return tok


def _build(
    tmp: Path,
    *,
    seed: int,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    vocab_size: int,
    broken: bool,
) -> None:
    import mlx.core as mx

    tok = write_tokenizer(tmp, vocab_size=vocab_size)
    config = _config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        num_layers=num_layers,
        heads=num_heads,
        kv_heads=num_kv_heads,
        eos=tok.token_to_id(EOS_TOKEN),
    )
    weights = _weights(config, seed=seed, allowed=_allowed_ids(tok))
    if broken:
        # a valid safetensors file whose shapes do not match config.json: mlx_lm fails to load it
        weights["model.embed_tokens.weight"] = mx.zeros((3, 5), dtype=mx.float16)
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    config[MARKER_KEY] = {"seed": seed, "broken": broken}
    _write_json(tmp / "config.json", config)


def _existing_marker(out_dir: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    marker = config.get(MARKER_KEY) if isinstance(config, dict) else None
    return marker if isinstance(marker, dict) else None


def generate_model(
    out_dir: Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int = 512,
    broken: bool = False,
) -> Path:
    """Write a tiny llama model to `out_dir` atomically (temp dir + rename) and return it.

    If `out_dir` already holds a dev model made with the same seed and kind, it is returned as is;
    any other existing `out_dir` raises FileExistsError.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        if _existing_marker(out_dir) == {"seed": seed, "broken": broken}:
            return out_dir
        raise FileExistsError(f"{out_dir} exists and is not a dev model with seed {seed}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        _build(
            tmp,
            seed=seed,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            vocab_size=vocab_size,
            broken=broken,
        )
        os.chmod(tmp, 0o755)  # noqa: S103 (mkdtemp makes 0700; a model dir is world-readable)
        try:
            tmp.rename(out_dir)
        except OSError:
            # lost a race with another writer: theirs is complete (rename is atomic)
            if _existing_marker(out_dir) != {"seed": seed, "broken": broken}:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def generate_broken_model(out_dir: Path, *, seed: int = 0) -> Path:
    """A directory that looks like a model (config, tokenizer, safetensors) but fails to load."""
    return generate_model(out_dir, seed=seed, broken=True)


def main(argv: list[str]) -> int:
    """CLI: `--out DIR --seed N [--broken] [--kind chat|embedding|reranker]`; prints the model
    directory. `embedding` / `reranker`: the tiny qwen3 models of the mlx-embed / mlx-rerank
    engines (dev.testmodels)."""
    parser = argparse.ArgumentParser(
        prog="mlxfleet-agent make-model", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="model directory to create")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    parser.add_argument("--broken", action="store_true", help="write a model that fails to load")
    parser.add_argument(
        "--kind",
        choices=("chat", "embedding", "reranker"),
        default="chat",
        help="chat (mlx-lm, default), embedding (mlx-embed) or reranker (mlx-rerank)",
    )
    args = parser.parse_args(argv)
    if args.kind != "chat":
        if args.broken:
            parser.error("--broken makes chat models only")
        from mlxfleet_agent.dev import testmodels  # numpy, mlx: only when asked

        if args.kind == "embedding":
            path = testmodels.generate_embedding_model(args.out, seed=args.seed)
        else:
            path = testmodels.generate_reranker_model(args.out)
        print(path)
        return 0
    path = generate_model(args.out, seed=args.seed, broken=args.broken)
    print(path)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
