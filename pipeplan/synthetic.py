"""Synthetic profiles for tests and benchmarks: models too large to profile here.

Times follow t = overhead + per_sample·m per layer (the form the cost model fits), derived from
a FLOP count at a stated device throughput, so the planner can be exercised on bert-large, a
1,000-layer model or a 250,000-token vocabulary without running them. A profile made here says
so in its device name ("synthetic ...").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeplan.formats import (
    DeviceInfo,
    LayerProfile,
    MicroBatchTiming,
    ModelInfo,
    Profile,
    ProfileSettings,
)


@dataclass(frozen=True)
class SyntheticLayer:
    kind: str
    params: int
    fwd_s_per_sample: float
    bwd_s_per_sample: float
    out_bytes_per_sample: int
    saved_bytes_per_sample: float
    overhead_s: float = 20e-6  # kernel launches: the intercept of t = a + c·m


def transformer_layers(
    *,
    num_blocks: int,
    hidden: int,
    seq_len: int,
    vocab: int,
    num_labels: int = 2,
    flops_per_s: float = 15e12,
    embedding_bwd_s_per_sample: float | None = None,
) -> list[SyntheticLayer]:
    """Embeddings, `num_blocks` BERT-style blocks (4h² attention + 8h² MLP parameters), head.
    Forward ≈ 2·params·tokens FLOPs (+ attention scores), backward ≈ 2× forward."""
    tokens = seq_len
    block_params = 12 * hidden * hidden + 13 * hidden
    block_fwd = (2 * block_params * tokens + 4 * tokens * tokens * hidden) / flops_per_s
    out = tokens * hidden * 4
    embed_params = (vocab + seq_len + 2) * hidden + 2 * hidden
    embed_fwd = 3 * tokens * hidden / flops_per_s * 50  # memory-bound gather, not FLOPs
    embed_bwd = (
        embedding_bwd_s_per_sample if embedding_bwd_s_per_sample is not None else 2 * embed_fwd
    )
    head_params = hidden * hidden + hidden + hidden * num_labels + num_labels
    head_fwd = 2 * head_params / flops_per_s
    layers = [SyntheticLayer("embeddings", embed_params, embed_fwd, embed_bwd, out, 2.0 * out)]
    for _ in range(num_blocks):
        layers.append(
            SyntheticLayer("block", block_params, block_fwd, 2 * block_fwd, out, 14.0 * out)
        )
    layers.append(
        SyntheticLayer("head", head_params, head_fwd, 2 * head_fwd, 4 * num_labels, out / tokens)
    )
    return layers


def synthetic_profile(
    layers: Sequence[SyntheticLayer],
    *,
    name: str = "synthetic",
    micro_batches: Sequence[int] = (1, 2, 4, 8, 16, 32),
    device_memory_bytes: int = 80 << 30,
    hidden: int | None = None,
) -> Profile:
    """A schema-valid Profile whose timings follow each layer's line exactly."""
    config = {"num_hidden_layers": len(layers) - 2}
    if hidden is not None:
        config["hidden_size"] = hidden
        # Heads of 64 as BERT's, dividing the width: the config passes a model folder's checks.
        config["num_attention_heads"] = hidden // 64 if hidden % 64 == 0 else 1
    profiled = []
    for index, layer in enumerate(layers):
        timings = [
            MicroBatchTiming(
                micro_batch=m,
                fwd_s=layer.overhead_s + layer.fwd_s_per_sample * m,
                bwd_s=layer.overhead_s + layer.bwd_s_per_sample * m,
                fwd_nograd_s=layer.overhead_s + 0.9 * layer.fwd_s_per_sample * m,
            )
            for m in micro_batches
        ]
        name_of = "block" + str(index) if layer.kind == "block" else layer.kind
        profiled.append(
            LayerProfile(
                index=index,
                name=name_of,
                kind=layer.kind,  # type: ignore[arg-type]
                params=layer.params,
                param_bytes=4 * layer.params,
                out_bytes_per_sample=layer.out_bytes_per_sample,
                saved_bytes_per_sample=layer.saved_bytes_per_sample,
                timings=timings,
            )
        )
    return Profile(
        # Not when it was made: a fixed time, so the same arguments give the same profile (and
        # sha256); the device name says it is synthetic.
        created_at="1970-01-01T00:00:00+00:00",
        model=ModelInfo(
            name=name,
            family="bert",
            config=config,
            input_shape=[1],
            input_dtype="int64",
            num_labels=2,
        ),
        device=DeviceInfo(
            kind="cuda",
            name=f"synthetic {name}",
            memory_bytes=device_memory_bytes,
            threads=1,
            torch_version="n/a",
            transformers_version="n/a",
            python_version="n/a",
            hostname="synthetic",
        ),
        settings=ProfileSettings(micro_batches=list(micro_batches), warmup=0, repeats=1, seed=0),
        layers=profiled,
    )


PRESETS = {
    "bert-base": dict(num_blocks=12, hidden=768, seq_len=128, vocab=30522),
    "bert-large": dict(num_blocks=24, hidden=1024, seq_len=128, vocab=30522),
    "bert-250k-vocab": dict(num_blocks=12, hidden=768, seq_len=128, vocab=250_000),
    # ViT-B/16 at 224 px: 197 tokens, a patch projection instead of a vocabulary.
    "vit-base": dict(num_blocks=12, hidden=768, seq_len=197, vocab=1, num_labels=1000),
}


def preset_profile(name: str, **overrides) -> Profile:
    shape = {**PRESETS[name], **overrides}
    hidden = shape["hidden"]
    return synthetic_profile(transformer_layers(**shape), name=f"{name} (synthetic)", hidden=hidden)
