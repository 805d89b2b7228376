"""`--precision bf16`: bfloat16 autocast with float32 master weights, profiled, planned and run.

What is checked, each against the same thing in fp32 so that a bf16 path that did nothing
fails: the profile records its precision and counts bfloat16 bytes; plan, preview and run refuse
a profile of the other precision; the frozen prefix and its cache rows, and what a stage sends
to the next, are bfloat16; weights, gradients and AdamW state stay float32; losses differ from
fp32 but stay finite and close; a 2-rank run on digits reaches the fp32 run's accuracy.
"""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

import cli
from executor.cache import ActivationCache
from executor.parallel import PhaseRuntime, StepMean, frozen_forward
from executor.planning import shipped_profile
from pipeplan import models, profiler
from pipeplan.cluster import cluster_from_flags
from pipeplan.costmodel import CostModel
from pipeplan.formats import (
    STEP_RECORDS,
    EpochRecord,
    PhaseRecord,
    Profile,
    RunConfig,
    load,
    read_records,
)
from pipeplan.precision import compute

CPU = torch.device("cpu")
FP32_PROFILE = shipped_profile("vit-digits", "cpu")
BF16_PROFILE = shipped_profile("vit-digits", "cpu", "bf16")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("pipeplan: error: "), err
    return err


# ----------------------------------------------------------------------------- the flag


@pytest.mark.parametrize("command", ["profile vit-digits", "plan", "preview", "run"])
def test_precision_is_a_flag_of_every_command_and_takes_fp32_or_bf16(command, capsys, tmp_path):
    args = [*command.split(), "--precision", "fp16"]
    if command in ("plan", "preview"):
        args += ["--profile", str(FP32_PROFILE)]
    if command != "preview":
        args += ["--runs-dir", str(tmp_path)] if command == "run" else ["--out", "p.json"]
    assert cli.main(args) == 2
    assert "--precision: must be fp32 or bf16, not 'fp16'" in one_error_line(capsys)


# ----------------------------------------------------------------------------- the profile


@pytest.fixture(scope="module")
def vit_profiles() -> dict[str, Profile]:
    seq = models.build("vit-digits")
    return {
        p: profiler.profile_layers(seq, micro_batches=[1, 4], warmup=0, repeats=1, precision=p)
        for p in ("fp32", "bf16")
    }


def test_a_bf16_profile_records_its_precision_and_counts_bfloat16_bytes(vit_profiles):
    fp32, bf16 = vit_profiles["fp32"], vit_profiles["bf16"]
    assert (fp32.model.dtype, fp32.model.precision) == ("float32", "fp32")
    assert (bf16.model.dtype, bf16.model.precision) == ("bfloat16", "bf16")
    for a, b in zip(fp32.layers, bf16.layers, strict=True):
        assert a.param_bytes == b.param_bytes  # master weights: float32 either way
        if b.kind == "head":  # the logits reach the loss in float32
            assert b.out_bytes_per_sample == a.out_bytes_per_sample
            continue
        # What crosses a stage boundary (and what the cache holds) is bfloat16: exactly half.
        assert 2 * b.out_bytes_per_sample == a.out_bytes_per_sample
        # Autocast saves bfloat16 copies for the matrix products (layer norms keep float32):
        # observed 0.50 of fp32's saved bytes per sample for vit-digits; 0.75 leaves margin.
        assert b.saved_bytes_per_sample < 0.75 * a.saved_bytes_per_sample
    for a, b in zip(fp32.layers[1:-1], bf16.layers[1:-1], strict=True):
        # A block's bfloat16 weight copies are saved for backward once per micro-batch:
        # observed 393216 bytes = 0.496 × its float32 parameter bytes (the matrices, not the
        # biases and norms); fp32 saves no copy.
        assert a.saved_bytes_fixed == 0
        assert 0.45 * b.param_bytes < b.saved_bytes_fixed <= 0.5 * b.param_bytes


def test_the_cost_model_prices_bfloat16_transfers_and_cache_reads(vit_profiles):
    costs = {}
    for precision, profile in vit_profiles.items():
        cluster = cluster_from_flags(nodes=1, devices_per_node=2, profile=profile)
        costs[precision] = CostModel(profile, cluster).phase_costs(4, 3, True)
    fp32, bf16 = costs["fp32"].boundary_bytes, costs["bf16"].boundary_bytes
    assert (2 * bf16[:-1] == fp32[:-1]).all() and bf16[-1] == fp32[-1]


def test_the_shipped_bf16_profile_is_of_bf16():
    assert load(Profile, BF16_PROFILE).model.precision == "bf16"
    assert load(Profile, FP32_PROFILE).model.precision == "fp32"


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("command", ["plan", "preview"])
def test_plan_and_preview_refuse_a_profile_of_the_other_precision(command, capsys, tmp_path):
    out = ["--out", str(tmp_path / "plan.json")] if command == "plan" else []
    shape = ["--devices-per-node", "2", "--global-batch", "64", "--samples", "1400", *out]
    for profile, given, measured in (
        (FP32_PROFILE, "bf16", "fp32"),
        (BF16_PROFILE, "fp32", "bf16"),
    ):
        # Only a --precision given is held to the profile (left out, it is the profile's).
        args = [command, "--profile", str(profile), *shape, "--precision", given]
        assert cli.main(args) == 2
        err = one_error_line(capsys)
        assert f"measured in {measured}, but --precision is {given}" in err
        assert cli.main([command, "--profile", str(profile), *shape, "--precision", measured]) == 0
        capsys.readouterr()


def test_run_refuses_a_profile_of_the_other_precision_before_any_process(capsys, tmp_path):
    runs = ["--runs-dir", str(tmp_path), "--name", "x"]
    assert cli.main(["run", "--precision", "bf16", "--profile", str(FP32_PROFILE), *runs]) == 2
    err = one_error_line(capsys)
    assert "measured for input (1, 8, 8) float32, fp32 precision" in err
    assert "this run feeds input (1, 8, 8) float32, bf16 precision" in err
    assert "pipeplan profile vit-digits --task classification --precision bf16" in err
    # A --precision given is held to the profile (left out, it is the profile's: test_cli).
    assert cli.main(["run", "--precision", "fp32", "--profile", str(BF16_PROFILE), *runs]) == 2
    assert "bf16 precision, classification, but this run feeds" in one_error_line(capsys)
    # No bf16 profile ships for bert-synth: the message says how to make one.
    assert cli.main(["run", "--model", "bert-synth", "--precision", "bf16", *runs]) == 2
    err = one_error_line(capsys)
    assert "no shipped profile for bert-synth on cpu in bf16" in err
    assert "pipeplan profile bert-synth --seq-len 32 --task classification" in err
    assert "--precision bf16 --out P.json" in err
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------- the cache


def test_the_frozen_prefix_and_its_cache_rows_are_bfloat16_under_bf16(tmp_path):
    seq = models.build("bert-synth", dropout=0.0)
    x, _ = seq.example_batch(4, torch.Generator().manual_seed(0))
    rows = {}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        hidden = frozen_forward(seq.layers, x, 0, 3, CPU, precision)
        assert hidden.dtype == dtype
        shape = tuple(hidden.shape[1:])
        cache = ActivationCache(4, 1 << 20, tmp_path)
        cache.create(3, shape, hidden.dtype)
        cache.store(torch.arange(4), hidden, 3)
        values, hit = cache.lookup(torch.arange(4))
        assert hit.all() and values.dtype == dtype and torch.equal(values, hidden)
        rows[precision] = cache.manifest()
        # Advancing the cache by two more frozen layers gives what the stage computes from
        # scratch, bit for bit: every frozen layer's output is rounded alike.
        direct = frozen_forward(seq.layers, x, 0, 5, CPU, precision)

        def advance(h, p=precision):
            return frozen_forward(seq.layers, h, 3, 5, CPU, p)

        cache.advance(5, advance, tuple(direct.shape[1:]), direct.dtype)
        assert torch.equal(cache.lookup(torch.arange(4))[0], direct)
        cache.close(unlink=True)
    assert rows["bf16"]["dtype"] == "bfloat16" and rows["fp32"]["dtype"] == "float32"
    assert 2 * rows["bf16"]["row_bytes"] == rows["fp32"]["row_bytes"]


# ----------------------------------------------------------------------------- one phase


def _phase(rank, world, out_dir):
    """Two ranks, bert-synth as a 2-stage pipeline whose stage 0 reads a cached frozen prefix
    of 3 layers; 3 steps in each precision from the same weights and batches."""
    from conftest import make_layout

    layout = make_layout(8, 3, True, (0, 5, 8), ((0, 1),), 2, "1f1b")
    for precision in ("fp32", "bf16"):
        seq = models.build("bert-synth", dropout=0.0)
        gen = torch.Generator().manual_seed(123)
        data = [seq.example_batch(8, gen) for _ in range(3)]

        def cached(x, precision=precision, seq=seq):
            return frozen_forward(seq.layers, x, 0, 3, CPU, precision)

        runtime = PhaseRuntime(
            seq.layers,
            StepMean(seq.loss_sum, seq.targets),
            layout,
            rank,
            example_input=lambda n, data=data, cached=cached: cached(data[0][0][:n]),
            device=CPU,
            make_optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
            precision=precision,
        )
        seen = {"stage_in": set(), "stage_out": set(), "grads": set()}
        runtime.module.register_forward_pre_hook(
            lambda m, args, seen=seen: seen["stage_in"].add(str(args[0].dtype))
        )
        runtime.module.register_forward_hook(
            lambda m, args, out, seen=seen: seen["stage_out"].add(str(out.dtype))
        )
        for p in runtime.params:
            p.register_post_accumulate_grad_hook(
                lambda p, seen=seen: seen["grads"].add(str(p.grad.dtype))
            )
        losses = [runtime.step(cached(x), y).loss for x, y in data]
        states = runtime.optimizer.state.values()
        seen["params"] = {str(p.dtype) for p in runtime.module.parameters()}
        seen["adam"] = {str(s[k].dtype) for s in states for k in ("exp_avg", "exp_avg_sq")}
        seen["losses"] = losses
        seen = {k: sorted(v) if isinstance(v, set) else v for k, v in seen.items()}
        with open(f"{out_dir}/{precision}-stage{runtime.topology.stage}.json", "w") as f:
            json.dump(seen, f)
        runtime.destroy()


@pytest.fixture(scope="module")
def phase(tmp_path_factory, gloo_ranks_module):
    out = tmp_path_factory.mktemp("precision")
    gloo_ranks_module(_phase, 2, str(out), deadline_s=200, what="precision test ranks")
    return {
        (p, s): json.loads((out / f"{p}-stage{s}.json").read_text())
        for p in ("fp32", "bf16")
        for s in (0, 1)
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_bf16_sends_bfloat16_between_stages_and_keeps_float32_master_weights(phase):
    for precision, sent in (("fp32", "torch.float32"), ("bf16", "torch.bfloat16")):
        first, last = phase[precision, 0], phase[precision, 1]
        assert first["stage_in"] == [sent]  # the cached frozen prefix
        assert first["stage_out"] == [sent]  # what stage 0 sends
        assert last["stage_in"] == [sent]  # what stage 1 receives
        assert last["stage_out"] == ["torch.float32"]  # logits into the loss
        for stage in (first, last):
            assert stage["params"] == stage["grads"] == stage["adam"] == ["torch.float32"]


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_bf16_losses_differ_from_fp32_but_stay_finite_and_close(phase):
    fp32, bf16 = phase["fp32", 1]["losses"], phase["bf16", 1]["losses"]
    assert all(math.isfinite(v) for v in bf16) and len(bf16) == len(fp32) == 3
    assert all(a != b for a, b in zip(fp32, bf16, strict=True))  # autocast is on
    # bfloat16 keeps 8 bits of mantissa: observed relative differences of 0.015 %, 0.061 % and
    # 0.038 %; 1 % leaves a margin of 16.
    assert all(abs(a - b) / a < 0.01 for a, b in zip(fp32, bf16, strict=True))


def _unsplit_losses(*cases):
    """The first step's loss of `_phase`'s model and batch run unsplit in one process, as
    transformers runs an export, for each (precision, rounded): under the precision's autocast,
    the output of each layer in `rounded` rounded to bfloat16 and computed on in float32."""
    seq = models.build("bert-synth", dropout=0.0)
    x, y = seq.example_batch(8, torch.Generator().manual_seed(123))
    losses = []
    for precision, rounded in cases:
        total = 0.0
        with torch.no_grad(), compute(CPU, precision):
            h = x
            for i, layer in enumerate(seq.layers[:3]):  # the frozen prefix: the whole batch
                h = layer(h)
                h = h.to(torch.bfloat16).float() if i in rounded else h
            for j in (0, 4):  # the pipeline's two micro-batches of 4
                hj = h[j : j + 4]
                for i, layer in enumerate(seq.layers[3:], start=3):
                    hj = layer(hj)
                    hj = hj.to(torch.bfloat16).float() if i in rounded else hj
                total += float(seq.loss_sum(hj.float(), y[j : j + 4]))
        losses.append(total / float(seq.targets(y)))
    return losses


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_bf16_pipeline_computes_as_the_unsplit_model_under_autocast(phase):
    """Found by the sixty-third round: the stage after a boundary (and the first layer after
    the frozen prefix, and each frozen layer) computed on its bfloat16 input as it was, so it
    added its whole residual stream in bfloat16, and a bf16 run's held-out accuracy differed
    from its export's under the same autocast by a token of 471. Now what arrives is computed
    on in float32: the 2-stage pipeline's first loss is the unsplit model's under autocast
    with the run's own roundings (the frozen prefix's layers 0-2, the boundary after layer 4),
    and within the one boundary's rounding of the model rounded only where the cache is."""
    fp32, as_run, cache_only = _unsplit_losses(
        ("fp32", ()), ("bf16", (0, 1, 2, 4)), ("bf16", (0, 1, 2))
    )
    assert phase["fp32", 1]["losses"][0] == pytest.approx(fp32, rel=1e-6)  # the same model
    pipeline = phase["bf16", 1]["losses"][0]
    # Observed: equal to the bit on CPU (0.6872307); the old code was 2.9e-4 off. 1e-6 is a
    # margin for the schedule's own reductions.
    assert pipeline == pytest.approx(as_run, rel=1e-6)
    # The boundary's one rounding alone: observed 5.0e-5 (the old code 2.4e-4), a margin of 2.
    assert pipeline == pytest.approx(cache_only, rel=1e-4)


# ----------------------------------------------------------------------------- a whole run

# 85 MiB per rank: vit-digits starts as a 2-stage pipeline in either precision (1×2 does not
# fit), so stage-to-stage traffic is real; 4 layers freeze for the last two epochs (4 and 5),
# and the planner decides whether their output is read from the cache (and, from each
# precision's own profile, the last phase's layout: observed 2x1 M=4 in fp32, 1x2 M=8 in bf16).
RUN = [
    "run",
    "--nproc",
    "2",
    "--model",
    "vit-digits",
    "--device-memory",
    "85MiB",
    "--epochs",
    "5",
    "--freeze",
    "0,0,0,4,4",
    "--lr",
    "1e-3",
    "--warmup-steps",
    "20",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for precision in ("fp32", "bf16"):
        args = [*RUN, "--precision", precision, "--name", precision, "--runs-dir", str(root)]
        assert cli.main(args) == 0
    return {p: root / p for p in ("fp32", "bf16")}


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, dict | list | tuple):
        for value in tree.values() if isinstance(tree, dict) else tree:
            yield from _tensors(value)


def _records(run_dir):
    records = read_records(run_dir / "run.jsonl")
    steps = [r for r in records if isinstance(r, STEP_RECORDS)]
    return steps, [r for r in records if isinstance(r, EpochRecord)]


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_a_bf16_run_on_digits_trains_as_the_fp32_run_until_rounding_compounds(runs):
    """The bf16 run follows the fp32 run step for step, its losses apart by bfloat16's
    rounding alone, and learns. Observed (2 ranks, this configuration, 2026-12-06): the first
    12 steps' losses within 8.3e-4 relative (seeds 0 and 1; the test allows 3e-3); from the
    end of the early loss plateau (steps 16-20) the two diverge, and the 5-epoch held-out
    accuracy then depends on that rounding: 66.0 % fp32 vs 84.7 % bf16 at seed 0, 63.5 % vs
    49.3 % at seed 1 (chance: 10 %). The earlier claim, "within 2 points" (64.1 vs 64.6 %),
    never held on this machine: the same commit gave 66.0 vs 79.9 %."""
    (fp32_steps, fp32_epochs), (bf16_steps, bf16_epochs) = (
        _records(runs["fp32"]),
        _records(runs["bf16"]),
    )
    # Autocast was on: every step's loss differs from fp32's, and none is lost to overflow.
    losses = [(a.loss, b.loss) for a, b in zip(fp32_steps, bf16_steps, strict=True)]
    assert all(a != b and math.isfinite(b) for a, b in losses if a is not None)
    early = [abs(b - a) / abs(a) for a, b in losses[:12]]
    assert max(early) <= 3e-3, early
    # Both learn: well above chance (the least observed 49.3 %).
    assert fp32_epochs[-1].eval_accuracy > 0.4 and bf16_epochs[-1].eval_accuracy > 0.4


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_a_bf16_run_caches_bfloat16_and_saves_and_exports_float32(runs):
    run_dir = runs["bf16"]
    assert load(RunConfig, run_dir / "run.json").precision == "bf16"  # a resume stays bf16
    # The planner decides whether a phase reads the cache (pipeplan.plan.decide_phase); with
    # the shipped bf16 profile this run's last phase does (observed: 4 frozen, 1x2 cached). It
    # has two epochs: a cached phase's first epoch fills the cache as it trains, so a phase of
    # one epoch would not be cached.
    phases = [r for r in read_records(run_dir / "run.jsonl") if isinstance(r, PhaseRecord)]
    assert phases[-1].layout.cached, "the last phase is not cached: pick a --freeze that caches"
    latest = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    manifest = json.loads((latest / "manifest.json").read_text())
    cache = manifest["cache"]  # rank 0's cache of the last phase's frozen prefix
    assert cache["dtype"] == "bfloat16"
    assert cache["row_bytes"] == 2 * math.prod(cache["sample_shape"])
    saved = torch.load(latest / "model.pt", weights_only=True)
    assert saved and {t.dtype for t in saved.values()} == {torch.float32}
    optimizer = torch.load(latest / "optimizer.pt", weights_only=True)
    assert {t.dtype for t in _tensors(optimizer)} == {torch.float32}  # AdamW's moments too
    exported = load_file(run_dir / "model" / "model.safetensors")
    assert {t.dtype for t in exported.values()} == {torch.float32}


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_calibrate_fits_a_bf16_run_only_to_a_bf16_profile(runs, capsys, tmp_path):
    out = ["--out", str(tmp_path / "calibrated.json")]
    assert cli.main(["calibrate", str(runs["bf16"]), "--profile", str(FP32_PROFILE), *out]) == 2
    assert "a run in bf16, but the profile was measured in fp32" in one_error_line(capsys)
    assert cli.main(["calibrate", str(runs["bf16"]), "--profile", str(BF16_PROFILE), *out]) == 0
    assert load(Profile, tmp_path / "calibrated.json").model.precision == "bf16"


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_killed_bf16_run_resumes_in_bf16_to_the_uninterrupted_parameters(tmp_path):
    """tests/test_checkpoint.py's kill-and-resume check, in bf16: rank 1 is SIGKILLed mid-run,
    `--resume` continues from the last checkpoint (float32 master weights and AdamW state) in
    the run's precision, and ends bit for bit where the uninterrupted bf16 run ends."""
    from test_checkpoint import COMMON, final_model, pipeplan

    runs = ["--runs-dir", str(tmp_path), "--precision", "bf16"]
    assert pipeplan("run", *COMMON, *runs, "--name", "full").returncode == 0
    killed = pipeplan("run", *COMMON, *runs, "--name", "cut", kill_after=300)
    assert killed.returncode != 0 and "rank 1" in killed.stderr.splitlines()[-1]
    resumed = pipeplan("run", "--resume", str(tmp_path / "cut"))
    assert resumed.returncode == 0, resumed.stderr
    full, cut = final_model(tmp_path / "full"), final_model(tmp_path / "cut")
    assert full.keys() == cut.keys()
    assert all(full[k].dtype == torch.float32 and torch.equal(full[k], cut[k]) for k in full)


@pytest.mark.timeout(120)
def test_a_plan_in_another_precision_suggests_the_profiles_own_input(tmp_path, capsys):
    """Found by the thirty-fifth round: `plan --precision bf16` with an fp32 profile of a text
    model suggested `pipeplan profile MODEL --precision bf16`, which profiles another input
    (the model's longest sequence) than the profile's, so `run` then refused the new profile.
    The command carries the profile's sequence length, task, head and padding: run as given
    (with quick timing flags), it profiles the same input in bf16."""
    from pipeplan.formats import Profile, load

    shipped = shipped_profile("bert-synth", "cpu")
    argv = ["plan", "--profile", str(shipped), "--global-batch", "8", "--samples", "64"]
    assert cli.main([*argv, "--epochs", "1", "--precision", "bf16", "--out", "x.json"]) == 2
    line = one_error_line(capsys)
    command = line.split("profile in bf16: ", 1)[1].split()
    assert command[:3] == ["pipeplan", "profile", "bert-synth"] and "--seq-len" in command, line
    out = command.index("--out")
    command[out + 1] = str(tmp_path / "p.json")
    quick = ["--micro-batch-sizes", "1", "--warmup", "0", "--repeats", "1"]
    assert cli.main([*command[1:], *quick]) == 0
    made, old = load(Profile, tmp_path / "p.json").model, load(Profile, shipped).model
    assert made.precision == "bf16"
    for field in ("input_shape", "input_dtype", "task", "num_labels", "padding_mask"):
        assert getattr(made, field) == getattr(old, field), field
