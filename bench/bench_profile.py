"""Profiler benchmark: wall time, repeatability and sanity of `pipeplan profile`.

    python bench/bench_profile.py            # all three parts (about 2.5 minutes)
    python bench/bench_profile.py --quick    # skip the bert-base wall-time part

1. Wall time of `pipeplan profile bert-base` at micro-batch sizes 1,2,4,8 (target ≤ 3 min), run as a
   user runs it, in a fresh process (imports and model build included).
2. Repeatability: two profiles of bert-tiny one after the other; per layer and micro-batch size,
   the relative difference of the median forward+backward times (target ≤ 10 %, worst reported).
3. Sanity: saved bytes per sample of a BERT block against an analytic count (target within 5 %),
   and summed parameter counts against transformers' `num_parameters()` (must be exact).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeplan import models, profiler


def bert_block_saved_bytes(seq_len: int, hidden: int, intermediate: int, heads: int) -> int:
    """Activation bytes one BERT block saves for backward per sample, counted from the math.

    This is Korthikanti et al. 2022 ("Reducing Activation Recomputation"), eq. 2, transcribed to
    fp32 with 4-byte dropout masks (what PyTorch keeps on CPU) and the attention math path
    (softmax probabilities are materialised), plus the LayerNorms' mean and rstd:
      attention: QKV input, Q, K, V, projection input, dropout mask   6 · s·h
                 softmax output, its dropout mask, dropped probabilities   3 · a·s²
      MLP:       input, GELU input, GELU output, dropout mask    2 · s·h + 2 · s·i
      LayerNorm: two inputs                                          2 · s·h
                 two (mean, rstd) pairs                              4 · s
    """
    s, h, i, a = seq_len, hidden, intermediate, heads
    elements = 10 * s * h + 2 * s * i + 3 * a * s * s + 4 * s
    return 4 * elements


def wall_time_bert_base() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["pipeplan", "profile", "bert-base", "--out", f"{tmp}/p.json"]
        cmd += ["--micro-batch-sizes", "1,2,4,8"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0


def repeatability() -> None:
    seq = models.build("bert-tiny")
    first, second = (profiler.profile_layers(seq) for _ in range(2))
    worst = (0.0, "", 0)
    print("  layer        m   run1 fwd+bwd ms   run2 fwd+bwd ms   diff")
    for a, b in zip(first.layers, second.layers, strict=True):
        for ta, tb in zip(a.timings, b.timings, strict=True):
            ra, rb = ta.fwd_s + ta.bwd_s, tb.fwd_s + tb.bwd_s
            diff = abs(ra - rb) / ((ra + rb) / 2)
            worst = max(worst, (diff, a.name, ta.micro_batch))
            print(
                f"  {a.name:<10} {ta.micro_batch:>3}   {ra * 1e3:15.3f}   {rb * 1e3:15.3f}"
                f"   {diff:5.1%}"
            )
    verdict = "meets" if worst[0] <= 0.10 else "MISSES"
    print(
        f"worst layer: {worst[1]} at micro-batch {worst[2]}: {worst[0]:.1%} apart "
        f"({verdict} the 10 % target)"
    )


def sanity() -> None:
    for name in ("bert-tiny", "bert-base"):
        seq = models.build(name)
        c = seq.config
        prof = profiler.profile_layers(seq, micro_batches=[1, 2], warmup=0, repeats=1)
        measured = prof.layers[1].saved_bytes_per_sample
        analytic = bert_block_saved_bytes(
            seq.input_shape[0], c.hidden_size, c.intermediate_size, c.num_attention_heads
        )
        print(
            f"{name} block saved bytes/sample: measured {measured:,.0f}, analytic {analytic:,}, "
            f"ratio {measured / analytic:.4f}"
        )
    for name in models.known_models():
        seq, hf = models.build_with_hf(name)
        ours = sum(p.numel() for p in seq.layers.parameters())
        same = "equal" if ours == hf.num_parameters() else "DIFFERENT"
        print(
            f"{name} params: layers sum {ours:,}, HF num_parameters {hf.num_parameters():,}"
            f" -> {same}"
        )
        del seq, hf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the bert-base wall time")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, threads per profile: 1, host cores: "
        f"{len(__import__('os').sched_getaffinity(0))}"
    )
    if not args.quick:
        seconds = wall_time_bert_base()
        verdict = "meets" if seconds <= 180 else "MISSES"
        print(
            f"[1] pipeplan profile bert-base (m = 1,2,4,8): {seconds:.1f} s wall "
            f"({verdict} the 180 s target, ratio {seconds / 180:.2f})"
        )
    print("[2] repeatability, two bert-tiny profiles back to back:")
    repeatability()
    print("[3] sanity:")
    sanity()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
