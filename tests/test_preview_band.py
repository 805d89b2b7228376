"""The preview states the freeze schedule it prices; `--freeze auto` is a band: the α bound as
the best case, and the earliest AutoFreeze's gradient criterion can freeze as the later case.
Each schedule is recomputed here without pipeplan's schedule helpers: the α bound from its
formula, the later case by driving the real `AutoFreeze` with the gradient norms that make it
freeze fastest."""

from __future__ import annotations

import copy
import itertools
import json
import math
import random

import pytest

import cli
import pipeplan
from executor.planning import shipped_profile
from pipeplan.cluster import cluster_from_flags
from pipeplan.formats import FreezeSchedule, Profile, load
from pipeplan.freeze import AutoFreeze, gradient_freeze_point, gradient_reach
from pipeplan.plan import make_plan, make_preview

PROFILE = str(shipped_profile("vit-digits", "cpu"))
BLOCKS = 8  # vit-digits: layers 0 (embeddings), 1..8 (blocks), 9 (head)
ALPHA, EPOCHS = 0.3, 10
# A run of vit-digits on 2 ranks with 100 MiB each, as `pipeplan demo` runs it.
CLUSTER = dict(devices_per_node=2, device_memory="100MiB", global_batch=64, samples=1437)
FLAGS = ["--devices-per-node", "2", "--device-memory", "100MiB", "--global-batch", "64"]
FLAGS += ["--samples", "1437"]


def alpha_bound(alpha: float, epochs: int, blocks: int) -> list[int]:
    """⌈n·(1−(1−α)^T)⌉ frozen blocks at epoch T, the embeddings with the first: the formula."""
    per_epoch = []
    for t in range(epochs):
        frozen_blocks = min(blocks, math.ceil(round(blocks * (1 - (1 - alpha) ** t), 9)))
        per_epoch.append(0 if frozen_blocks == 0 else frozen_blocks + 1)
    return per_epoch


def fastest_autofreeze(alpha: float, epochs: int, blocks: int) -> list[int]:
    """The real AutoFreeze, decided at each epoch end, fed at every decision the gradient
    norms (of every 0/1 pattern of change rates over the active layers) that freeze the most:
    the earliest any run with `--freeze auto` can freeze."""
    rule = AutoFreeze("auto", blocks, alpha)
    layers = range(blocks + 2)
    norms = {i: 1.0 for i in layers}
    frozen, per_epoch = 0, [0]
    for epoch in range(1, epochs):
        best = None
        active = [i for i in layers if i >= frozen]
        for pattern in itertools.product((0.0, 1.0), repeat=len(active)):
            trial = copy.deepcopy(rule)
            now = {i: norms[i] * (1 + rate) for i, rate in zip(active, pattern, strict=True)}
            decided = trial.decide(epoch, now, frozen)
            if best is None or decided > best[0]:
                best = (decided, trial, now)
        frozen, rule, now = best
        norms = {**norms, **now}
        per_epoch.append(frozen)
    return per_epoch


@pytest.fixture(scope="module")
def band():
    return pipeplan.preview(profile=PROFILE, epochs=EPOCHS, alpha=ALPHA, **CLUSTER)


def test_auto_is_a_band_of_the_alpha_bound_and_the_earliest_autofreeze(band):
    assert band.freeze == "auto"
    best, later = band.cases
    assert (best.case, later.case) == ("best", "later")
    # The stated schedules, recomputed independently.
    assert best.freeze.frozen_layers == alpha_bound(ALPHA, EPOCHS, BLOCKS)
    assert later.freeze.frozen_layers == fastest_autofreeze(ALPHA, EPOCHS, BLOCKS)
    # The case is one where they differ (auto cannot freeze before its second decision).
    assert best.freeze.frozen_layers != later.freeze.frozen_layers
    assert later.freeze.frozen_layers[:2] == [0, 0] and best.freeze.frozen_layers[1] > 0
    assert best.predicted_speedup >= later.predicted_speedup > 1.0
    assert band.predicted_speedup == best.predicted_speedup


def test_each_case_is_priced_as_the_schedule_it_states(band):
    profile = load(Profile, PROFILE)
    cluster = cluster_from_flags(
        nodes=1, devices_per_node=2, device_memory=100 << 20, profile=profile
    )
    best = band.cases[0]
    # The best case is what the per-epoch rows, the ablation and the plan show.
    assert [row.layout.frozen_layers for row in band.epochs] == best.freeze.frozen_layers
    assert band.plan.inputs.freeze == best.freeze
    for case in band.cases:
        # A plain list with the stated frozen layers, priced on its own, gives the same figure.
        given = FreezeSchedule(source="list", frozen_layers=case.freeze.frozen_layers)
        shape = dict(global_batch=64, samples=1437, epochs=EPOCHS, freeze=given)
        alone = make_preview(profile, cluster, **shape)
        assert alone.predicted_speedup == pytest.approx(case.predicted_speedup, rel=1e-9)
        plan = make_plan(profile, cluster, **shape)
        assert case.total_s == pytest.approx(plan.predicted_total_s, rel=1e-9)
        assert case.predicted_speedup == pytest.approx(
            band.baseline.total_s / plan.predicted_total_s, rel=1e-8
        )


@pytest.mark.parametrize(
    "options, source, frozen",
    [
        (dict(freeze_schedule="0,0,3,5", epochs=4), "list", [0, 0, 3, 5]),
        (dict(freeze="alpha", epochs=EPOCHS), "alpha", alpha_bound(ALPHA, EPOCHS, BLOCKS)),
        (dict(freeze="none", epochs=3), "none", [0, 0, 0]),
    ],
)
def test_an_explicit_schedule_gives_one_figure_labelled_with_it(options, source, frozen):
    preview = pipeplan.preview(profile=PROFILE, **{**CLUSTER, **options})
    (case,) = preview.cases
    assert (preview.freeze, case.case) == (source, "given")
    assert case.freeze.frozen_layers == frozen
    assert case.predicted_speedup == preview.predicted_speedup
    if source == "none":  # the plan is the baseline
        assert case.predicted_speedup == 1.0


def test_the_alpha_schedule_alone_is_the_best_case_of_auto(band):
    alpha = pipeplan.preview(profile=PROFILE, epochs=EPOCHS, freeze="alpha", **CLUSTER)
    assert alpha.cases[0].predicted_speedup == band.cases[0].predicted_speedup


def test_the_command_states_the_schedules_and_the_band(capsys):
    assert cli.main(["preview", "--profile", PROFILE, *FLAGS, "--epochs", str(EPOCHS)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "best case: 0 4 6 7 8×2 9×4:" in out
    assert "later case: 0×2 4 6 7 8×5:" in out
    assert "predicted speedup " in out and "× over the baseline" in out
    argv = ["preview", "--profile", PROFILE, *FLAGS, "--epochs", "4"]
    assert cli.main([*argv, "--freeze-schedule", "0,0,3,5"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "freeze schedule: the list given; frozen layers per epoch: 0×2 3 5" in out
    assert "later case" not in out
    assert cli.main([*argv, "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    assert [c["case"] for c in cases] == ["best", "later"]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--freeze", "none", "--alpha", "0.2"], "--alpha means nothing with --freeze none"),
        (
            ["--freeze", "alpha", "--freeze-schedule", "0,1"],
            "--freeze means nothing with --freeze-schedule",
        ),
        (["--freeze", "sometimes"], "--freeze"),
    ],
)
def test_contradictory_freeze_flags_are_one_line(capsys, extra, fragment):
    assert cli.main(["preview", "--profile", PROFILE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipeplan: error: ") and fragment in err and err.count("\n") == 1


@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
def test_one_decision_freezes_at_most_half_the_active_layers(blocks):
    """gradient_reach is the criterion's largest step: every ordering of the active layers'
    change rates (ties included) stays within it, and some ordering reaches it."""
    for frozen in range(blocks + 2):
        active = list(range(frozen, blocks + 2))  # the head, blocks + 1, is measured too
        reached = frozen
        for rates in itertools.product(range(len(active)), repeat=len(active)):
            before = {i: 1.0 for i in active}
            now = {i: 1.0 + r for i, r in zip(active, rates, strict=True)}
            reached = max(reached, gradient_freeze_point([before, now], frozen))
        assert reached == gradient_reach(frozen, blocks)


def test_no_gradient_history_freezes_earlier_than_the_later_case():
    later = fastest_autofreeze(ALPHA, EPOCHS, BLOCKS)
    generator = random.Random(0)
    for _ in range(200):
        rule, frozen = AutoFreeze("auto", BLOCKS, ALPHA), 0
        for epoch in range(1, EPOCHS):
            norms = {i: generator.lognormvariate(0, 1) for i in range(frozen, BLOCKS + 2)}
            frozen = rule.decide(epoch, norms, frozen)
            assert frozen <= later[epoch]


def test_throughput_counts_the_samples_an_epoch_trains(band):
    """Found by the twenty-ninth round: the preview's samples/s divided all of --samples by the
    epoch's time, though the last partial batch is dropped (1437 samples, batch 64: 22 steps
    train 1408), up to 2× high at odd shapes. Now it is what the run measures, and a preview
    that says otherwise is refused."""
    trained = (1437 // 64) * 64
    for row in band.epochs:
        assert row.samples_per_s == pytest.approx(trained / row.epoch_s, rel=2e-8)
    data = band.model_dump(mode="json")
    data["epochs"][0]["samples_per_s"] = 1437 / data["epochs"][0]["epoch_s"]
    with pytest.raises(ValueError, match=r"epochs\[0\]\.samples_per_s"):
        type(band).model_validate(data)
