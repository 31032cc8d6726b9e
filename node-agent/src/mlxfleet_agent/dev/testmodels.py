"""Tiny Qwen3 embedding and rerank models generated locally, for tests and benchmarks.

Both are `qwen3` checkpoints mlx_lm loads (hidden 64, 2 layers, 4 heads / 2 KV heads, a
byte-level BPE tokenizer trained here, bfloat16 safetensors), laid out like the real ones:
- embedding (`generate_embedding_model`): a `Qwen3Model` export (weight names without the
  `model.` prefix, no LM head, tied embeddings), sentence-transformers files (`modules.json`,
  `1_Pooling/config.json` with last-token pooling, `2_Normalize`) and a tokenizer whose
  post-processor appends `<|endoftext|>`, as Qwen3-Embedding's does. Weights: random (seeded).
- reranker (`generate_reranker_model`): a full `Qwen3ForCausalLM` with an untied LM head whose
  "yes"/"no" tokens exist. Its weights are constructed, not random, so relevance is a property
  it provably has: layer 0 attends uniformly (zero query/key weights), which writes the count of
  each of the `WORDS` over the prompt into the last position; its MLP squares those counts
  (x * silu(x)) into one "score" coordinate, which the LM head reads as yes minus no. A word the
  query and the document share is counted twice, and a square grows faster than a sum, so for
  documents of the same token length the one that contains a query word scores higher, and
  more shared words score higher still. Layer 1 is the identity (all-zero projections). The
  generator checks this on sample pairs and refuses to write a model that fails it.
The config records what each model is (`mlxfleet_devmodel.kind`). Directories are written
atomically (temp dir + rename); the same arguments give the same bytes.
May import: mlx, mlx_lm, tokenizers, numpy, engines.prompts. Called by: tests, benchmarks,
`mlxfleet-agent make-model --kind embedding|reranker` (dev.devmodels), the CLI below.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlxfleet_agent.engines import prompts

MARKER_KEY = "mlxfleet_devmodel"
EMBEDDING_KIND = "qwen3-embedding"
RERANKER_KIND = "qwen3-reranker"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
# content words the reranker counts (none of them occurs in the rerank template)
WORDS = (  # noqa: SIM905 (a list of words reads best as text)
    "apple banana cherry grape lemon mango olive peach river ocean forest desert island valley "
    "mountain canyon tiger zebra eagle shark whale otter falcon rabbit violin piano guitar drum "
    "flute trumpet harp cello"
).split()
FILLER = "the a of in on by with and near under over after from into".split()  # noqa: SIM905
HIDDEN = 64
HEAD_DIM = 16
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
LAYERS = 2
VOCAB = 1024
# reranker construction constants (see the module docstring)
_BIAS = 8.0  # every embedding's coordinate 0: keeps RMS norms nearly constant
_UNIT = 1.0  # a token's own coordinate (its word's, or the shared "other token" one)
_SQUARE = 96.0  # MLP gain: about one unit per count at typical prompt lengths (~100 tokens)
_OTHER, _SCORE, _FIRST_WORD = 1, 2, 3
_LOGIT_GAP = 3.0  # calibration: typical relevant/irrelevant pairs land near +-3 logits


def _corpus() -> list[str]:
    template = [
        prompts.RERANK_PREFIX,
        prompts.RERANK_SUFFIX,
        prompts.rerank_body("q", "d"),
        "yes no yes no",
    ]
    words = [" ".join(WORDS), " ".join(reversed(WORDS)), " ".join(FILLER)]
    return template * 6 + words * 30


def _tokenizer(*, append_end: bool) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    byte_level = processors.ByteLevel(trim_offsets=False)
    if append_end:
        end = prompts.END_TOKEN
        template = processors.TemplateProcessing(
            single=f"$A {end}",
            pair=f"$A {end} $B {end}",
            special_tokens=[(end, tok.token_to_id(end))],
        )
        tok.post_processor = processors.Sequence([byte_level, template])
    else:
        tok.post_processor = byte_level
    for word in (*WORDS, prompts.YES_TOKEN, prompts.NO_TOKEN):
        if len(tok.encode(f" {word}", add_special_tokens=False).ids) != 1:
            raise RuntimeError(f"tokenizer did not learn ' {word}' as one token")
    for word in (prompts.YES_TOKEN, prompts.NO_TOKEN):
        if tok.token_to_id(word) is None:
            raise RuntimeError(f"tokenizer has no {word!r} token")
    return tok


def _config(*, vocab_size: int, tie: bool, kind: str, end_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": end_id,
        MARKER_KEY: {"kind": kind},
    }


def _shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    args: Any = qwen3.ModelArgs
    model = qwen3.Model(args.from_dict(config))
    flat: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    return {name: tuple(p.shape) for name, p in flat}


def _embedding_weights(config: dict[str, Any], *, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in sorted(_shapes(config).items()):
        if name.endswith("norm.weight"):
            w = np.ones(shape)
        elif name.endswith("embed_tokens.weight"):
            w = rng.normal(size=shape)
        else:
            w = rng.normal(size=shape) * (0.5 / shape[-1] ** 0.5)
        out[name.removeprefix("model.")] = w  # a Qwen3Model export: no `model.` prefix
    return out


def _word_ids(tok: Any) -> dict[int, int]:
    """token id -> word index, for ' word' and (when it is a token) 'word'."""
    ids: dict[int, int] = {}
    for k, word in enumerate(WORDS):
        for text in (f" {word}", word):
            enc = tok.encode(text, add_special_tokens=False).ids
            if len(enc) == 1:
                ids[enc[0]] = k
    return ids


def _reranker_weights(
    config: dict[str, Any], tok: Any, *, no_weight: float, gain: float
) -> dict[str, np.ndarray]:
    shapes = _shapes(config)
    out = {name: np.zeros(shape) for name, shape in shapes.items()}
    for name in out:
        if name.endswith("norm.weight"):
            out[name][:] = 1.0
    emb = out["model.embed_tokens.weight"]
    emb[:, 0] = _BIAS
    words = _word_ids(tok)
    for tid in range(emb.shape[0]):
        emb[tid, _FIRST_WORD + words[tid] if tid in words else _OTHER] = _UNIT
    attn, mlp = "model.layers.0.self_attn.", "model.layers.0.mlp."
    per_kv = HEAD_DIM
    heads_per_kv = HEADS // KV_HEADS
    for k in range(len(WORDS)):
        kv, j = divmod(k, per_kv)
        out[attn + "v_proj.weight"][kv * per_kv + j, _FIRST_WORD + k] = 1.0
        # the first query head of each KV group carries its values to the word's coordinate
        out[attn + "o_proj.weight"][_FIRST_WORD + k, kv * heads_per_kv * HEAD_DIM + j] = 1.0
        out[mlp + "gate_proj.weight"][k, _FIRST_WORD + k] = _SQUARE
        out[mlp + "up_proj.weight"][k, _FIRST_WORD + k] = _SQUARE
        out[mlp + "down_proj.weight"][_SCORE, k] = 1.0
    head = out["lm_head.weight"]
    head[tok.token_to_id(prompts.YES_TOKEN), _SCORE] = gain
    head[tok.token_to_id(prompts.NO_TOKEN), 0] = gain * no_weight
    return out


def sample_pairs(seed: int = 0, count: int = 24) -> list[tuple[str, str, str]]:
    """(query, relevant document, irrelevant document) of equal token length, for checks.

    The query is one or two words; the relevant document contains one of them, the irrelevant
    one none; both are four words from WORDS between filler words.
    """
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(count):
        picks = [WORDS[i] for i in rng.permutation(len(WORDS))[:8]]
        query_words = picks[: 1 + int(rng.integers(0, 2))]
        others = picks[2:7]
        relevant = [query_words[0], *others[:3]]
        irrelevant = others[:4]
        rng.shuffle(relevant)
        rng.shuffle(irrelevant)
        filler = [FILLER[int(i)] for i in rng.integers(0, len(FILLER), size=4)]

        def doc(ws: list[str], filler: list[str] = filler) -> str:
            return " ".join(f"{f} {w}" for f, w in zip(filler, ws, strict=True))

        pairs.append((" ".join(query_words), doc(relevant), doc(irrelevant)))
    return pairs


def _yes_minus_no(model: Any, tok: Any, query: str, document: str) -> float:
    """Reference scoring: the full model on one unpadded prompt, logits of its last token."""
    import mlx.core as mx

    p = prompts.rerank_prompt(query, document)
    ids = [
        i
        for part in (p.prefix, p.body, p.suffix)
        for i in tok.encode(part, add_special_tokens=False).ids
    ]
    logits = model(mx.array([ids]))[0, -1].astype(mx.float32)
    yes, no = tok.token_to_id(prompts.YES_TOKEN), tok.token_to_id(prompts.NO_TOKEN)
    return float(logits[yes] - logits[no])


def _as_model(config: dict[str, Any], weights: dict[str, np.ndarray]) -> Any:
    import mlx.core as mx
    from mlx_lm.models import qwen3

    args: Any = qwen3.ModelArgs
    model = qwen3.Model(args.from_dict(config))
    model.load_weights([(k, mx.array(v).astype(mx.bfloat16)) for k, v in weights.items()])
    return model


def _calibrated_reranker(config: dict[str, Any], tok: Any) -> dict[str, np.ndarray]:
    """Constructed weights with the "no" logit set between typical relevant and irrelevant
    pairs and the gain set so they sit near +-_LOGIT_GAP; then checked on sample pairs."""
    pairs = sample_pairs(seed=1)
    scored = []
    for no_weight in (0.0, 1.0):
        raw = _as_model(config, _reranker_weights(config, tok, no_weight=no_weight, gain=1.0))
        scored.append(
            [
                (_yes_minus_no(raw, tok, q, good), _yes_minus_no(raw, tok, q, bad))
                for q, good, bad in pairs
            ]
        )
    rel = float(np.median([g for g, _ in scored[0]]))
    irr = float(np.median([b for _, b in scored[0]]))
    # what one unit of "no" weight adds: coordinate 0 after the final norm (about _BIAS / rms)
    unit = float(np.median([a[0] - b[0] for a, b in zip(scored[0], scored[1], strict=True)]))
    half_gap = max((rel - irr) / 2, 1e-3)
    weights = _reranker_weights(
        config, tok, no_weight=(rel + irr) / 2 / unit, gain=_LOGIT_GAP / half_gap
    )
    model = _as_model(config, weights)
    for q, good, bad in sample_pairs(seed=2):
        s_good, s_bad = _yes_minus_no(model, tok, q, good), _yes_minus_no(model, tok, q, bad)
        if not s_good > s_bad:
            raise RuntimeError(
                f"constructed reranker failed its own check on {q!r}: {s_good} <= {s_bad}"
            )
    return weights


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _save(tmp: Path, tok: Any, config: dict[str, Any], weights: dict[str, np.ndarray]) -> None:
    import mlx.core as mx

    arrays = {k: mx.array(v).astype(mx.bfloat16) for k, v in sorted(weights.items())}
    mx.save_safetensors(str(tmp / "model.safetensors"), arrays, metadata={"format": "mlx"})
    tok.save(str(tmp / "tokenizer.json"))
    _write_json(tmp / "config.json", config)
    _write_json(
        tmp / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": prompts.END_TOKEN,
            "model_max_length": 40960,
            "clean_up_tokenization_spaces": False,
        },
    )


def _build_embedding(tmp: Path, *, seed: int) -> None:
    tok = _tokenizer(append_end=True)
    config = _config(
        vocab_size=tok.get_vocab_size(),
        tie=True,
        kind=EMBEDDING_KIND,
        end_id=tok.token_to_id(prompts.END_TOKEN),
    )
    config[MARKER_KEY]["seed"] = seed
    _save(tmp, tok, config, _embedding_weights(config, seed=seed))
    st_type = "sentence_transformers.models."
    (tmp / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": st_type + "Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": st_type + "Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": st_type + "Normalize"},
            ],
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    _write_json(
        tmp / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": HIDDEN,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": False,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": True,
            "include_prompt": True,
        },
    )
    (tmp / "2_Normalize").mkdir()


def _build_reranker(tmp: Path) -> None:
    tok = _tokenizer(append_end=False)
    config = _config(
        vocab_size=tok.get_vocab_size(),
        tie=False,
        kind=RERANKER_KIND,
        end_id=tok.token_to_id("<|im_end|>"),
    )
    _save(tmp, tok, config, _calibrated_reranker(config, tok))


def _marker(out_dir: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    marker = config.get(MARKER_KEY) if isinstance(config, dict) else None
    return marker if isinstance(marker, dict) else None


def _write_atomically(out_dir: Path, marker: dict[str, Any], build: Callable[[Path], None]) -> Path:
    out_dir = Path(out_dir)
    if out_dir.exists():
        if _marker(out_dir) == marker:
            return out_dir
        raise FileExistsError(f"{out_dir} exists and is not a dev model {marker}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        build(tmp)
        os.chmod(tmp, 0o755)  # noqa: S103 (mkdtemp makes 0700; a model dir is world-readable)
        try:
            tmp.rename(out_dir)
        except OSError:
            if _marker(out_dir) != marker:  # lost a race: theirs is complete (rename is atomic)
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def generate_embedding_model(out_dir: Path, *, seed: int = 0) -> Path:
    """A tiny Qwen3-Embedding-style model in `out_dir` (reused if already generated)."""
    return _write_atomically(
        out_dir,
        {"kind": EMBEDDING_KIND, "seed": seed},
        lambda tmp: _build_embedding(tmp, seed=seed),
    )


def generate_reranker_model(out_dir: Path) -> Path:
    """A tiny Qwen3-Reranker-style model with constructed weights (see the module docstring)."""
    return _write_atomically(out_dir, {"kind": RERANKER_KIND}, _build_reranker)


def main(argv: list[str]) -> int:
    """CLI: `--kind embedding|reranker --out DIR [--seed N]`; prints the model directory."""
    parser = argparse.ArgumentParser(
        prog="python -m mlxfleet_agent.dev.testmodels", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kind", choices=("embedding", "reranker"), required=True)
    parser.add_argument("--out", type=Path, required=True, help="model directory to create")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (embedding only)")
    args = parser.parse_args(argv)
    if args.kind == "embedding":
        path = generate_embedding_model(args.out, seed=args.seed)
    else:
        path = generate_reranker_model(args.out)
    print(path)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
