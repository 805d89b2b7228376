"""A run's forecast end-to-end speedup at each epoch end: the frozen layers of the epochs so far,
then a stated continuation, priced as `pipeplan preview` prices a schedule. The continuations
are recomputed here from their definitions, and every figure is checked against its own
`make_preview` call."""

from __future__ import annotations

import pytest
from test_preview_band import alpha_bound
from test_report import elastic_records, write_run

import cli
from executor.planning import shipped_profile
from executor.worker import epoch_line
from pipeplan.cluster import run_cluster
from pipeplan.formats import (
    EpochRecord,
    Forecast,
    ForecastCase,
    FreezeSchedule,
    Pricing,
    Profile,
    RunConfig,
    load,
    read_records,
)
from pipeplan.plan import make_forecast, make_preview, profile_identity
from pipeplan.report import make_report

PROFILE = shipped_profile("vit-digits", "cpu")
BLOCKS, EPOCHS, BATCH, SAMPLES = 8, 6, 64, 1437


@pytest.fixture(scope="module")
def priced():
    profile = load(Profile, PROFILE)
    config = RunConfig(model="vit-digits", nproc=2, device_memory_bytes=100 << 20)
    cluster = run_cluster(config, profile)
    pricing = Pricing(
        source="solver",
        profile="profile.json",
        profile_sha256=profile_identity(profile).sha256,
        calibration="none",
        cluster=cluster,
    )
    return profile, cluster, pricing


def preview_speedup(profile, cluster, frozen: list[int], samples: int = SAMPLES) -> float:
    schedule = FreezeSchedule(source="list", frozen_layers=frozen)
    shape = dict(global_batch=BATCH, samples=samples, epochs=len(frozen), freeze=schedule)
    return make_preview(profile, cluster, **shape).predicted_speedup


def forecast(
    priced, mode: str, finished: list[int], freeze_list=(), samples: int = SAMPLES
) -> Forecast:
    profile, cluster, pricing = priced
    return make_forecast(
        profile,
        cluster,
        pricing,
        global_batch=BATCH,
        samples=samples,
        epochs=EPOCHS,
        cache=True,
        mode=mode,
        alpha=0.3,
        freeze_list=list(freeze_list),
        finished=finished,
    )


def test_auto_is_forecast_with_no_further_freezing_and_with_the_alpha_bound(priced):
    profile, cluster, _ = priced
    finished = [0, 0, 4]  # e.g. the gradient criterion froze 4 layers for epoch 2
    cases = forecast(priced, "auto", finished).cases
    assert [c.continuation for c in cases] == ["no-further-freezing", "alpha-bound"]
    bound = alpha_bound(0.3, EPOCHS, BLOCKS)
    assert cases[0].frozen_layers == [0, 0, 4, 4, 4, 4]
    assert cases[1].frozen_layers == finished + [max(4, k) for k in bound[3:]]
    assert cases[1].frozen_layers != cases[0].frozen_layers
    for case in cases:
        expected = preview_speedup(profile, cluster, case.frozen_layers)
        assert case.speedup == pytest.approx(expected, rel=1e-9)
    assert 1.0 < cases[0].speedup <= cases[1].speedup


def test_a_schedule_decided_without_gradients_is_forecast_as_itself(priced):
    profile, cluster, _ = priced
    (case,) = forecast(priced, "list", [0, 3], freeze_list=[0, 3, 5]).cases
    assert case.continuation == "schedule"
    assert case.frozen_layers == [0, 3, 5, 5, 5, 5]  # the list, then its last value
    assert case.speedup == pytest.approx(
        preview_speedup(profile, cluster, case.frozen_layers), rel=1e-9
    )
    (alpha,) = forecast(priced, "alpha", [0]).cases
    assert alpha.frozen_layers == alpha_bound(0.3, EPOCHS, BLOCKS)
    (none,) = forecast(priced, "none", [0]).cases
    # The plan's total is rounded to 9 significant digits (§3.1), the baseline's is not.
    assert none.frozen_layers == [0] * EPOCHS and none.speedup == pytest.approx(1.0, rel=1e-8)


def test_the_epoch_line_states_the_forecast_and_its_continuations(priced):
    cases = [
        ForecastCase(continuation="no-further-freezing", frozen_layers=[0, 0], speedup=1.0),
        ForecastCase(continuation="alpha-bound", frozen_layers=[0, 4], speedup=1.234),
    ]
    record = EpochRecord(
        epoch=0,
        phase=0,
        frozen_layers=0,
        steps=3,
        epoch_s=1.0,
        train_loss=0.5,
        eval_accuracy=0.5,
        samples_per_s=192.0,
        forecast=Forecast(samples=192, pricing=priced[2], cases=cases),
    )
    assert epoch_line(record, 2, "1x2").endswith(
        "1x2, forecast speedup 1.00× (no further freezing) or 1.23× (the α bound from here)"
    )


def on_records_cluster(priced):
    """`priced` on the cluster elastic_records' phases were priced on (`fake_pricing(2)`): a
    run prices its forecasts on its phases' cluster (`check_one_cluster`)."""
    from conftest import fake_pricing

    profile, _, pricing = priced
    cluster = fake_pricing(2).cluster
    return profile, cluster, pricing.model_copy(update={"cluster": cluster})


def elastic_forecasts(priced) -> list[Forecast]:
    """A forecast for each of elastic_records' epochs: its frozen layers so far, and its
    samples its steps of whole batches (7, 1 and 2), as the records hold them to."""
    return [
        forecast(priced, "auto", [0], samples=7 * BATCH),
        forecast(priced, "auto", [0, 3], samples=1 * BATCH),
        forecast(priced, "auto", [0, 3, 3], samples=2 * BATCH),
    ]


def test_the_report_shows_each_epochs_forecast(tmp_path, priced, capsys, monkeypatch):
    priced = on_records_cluster(priced)
    records = elastic_records()
    forecasts = elastic_forecasts(priced)
    epochs = iter(forecasts)
    records = [
        r.model_copy(update=dict(forecast=next(epochs))) if isinstance(r, EpochRecord) else r
        for r in records
    ]
    # Two of the run's EPOCHS done: each forecast prices all of them (`_ForecastEpochs`).
    run_dir = write_run(tmp_path / "run", records, epochs=EPOCHS)
    assert [e.forecast for e in make_report(run_dir).epochs] == forecasts
    monkeypatch.setenv("COLUMNS", "200")  # one line per table row
    assert cli.main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "then no further freezing / the α bound from here" in " ".join(out.split())
    for f in forecasts:
        cell = " / ".join(f"{c.speedup:.2f}×" for c in f.cases)
        assert any(cell in line for line in out.splitlines() if "│" in line), cell


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
def test_a_run_records_its_forecast_at_every_epoch_end(tmp_path, capsys, monkeypatch):
    """One short 1-rank run with --freeze auto (the forecast prices the cluster the run names,
    whatever its size): each epoch record's forecast is the trajectory so far continued both
    ways, priced by make_preview with the profile and cluster the run names; the report shows
    it per epoch."""
    epochs, steps = 3, 3
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--device-memory", "100MiB"]
    argv += ["--epochs", str(epochs), "--max-steps-per-epoch", str(steps), "--alpha", "0.5"]
    assert cli.main([*argv, "--name", "f", "--runs-dir", str(tmp_path)]) == 0
    run_dir = tmp_path / "f"
    records = [r for r in read_records(run_dir / "run.jsonl") if isinstance(r, EpochRecord)]
    assert len(records) == epochs
    bound = alpha_bound(0.5, epochs, BLOCKS)
    for record in records:
        f = record.forecast
        assert f is not None and f.samples == steps * BATCH  # the capped epoch
        profile = load(Profile, run_dir / f.pricing.profile)
        assert profile_identity(profile).sha256 == f.pricing.profile_sha256
        finished = [r.frozen_layers for r in records[: record.epoch + 1]]
        rest = range(record.epoch + 1, epochs)
        continued = {
            "no-further-freezing": finished + [finished[-1] for _ in rest],
            "alpha-bound": finished + [max(finished[-1], bound[t]) for t in rest],
        }
        assert [c.continuation for c in f.cases] == list(continued)
        for case in f.cases:
            assert case.frozen_layers == continued[case.continuation]
            expected = preview_speedup(
                profile, f.pricing.cluster, case.frozen_layers, samples=f.samples
            )
            assert case.speedup == pytest.approx(expected, rel=1e-9)
    # The last epoch has nothing left to continue: both cases are the trajectory itself.
    assert records[-1].forecast.cases[0].speedup == records[-1].forecast.cases[1].speedup
    report = make_report(run_dir)
    assert [e.forecast for e in report.epochs] == [r.forecast for r in records]
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "200")  # the epoch table on one line per epoch
    assert cli.main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "forecast speedup" in out
    for record in records:
        cell = " / ".join(f"{c.speedup:.2f}×" for c in record.forecast.cases)
        assert any(
            line.split("│")[1].strip() == str(record.epoch) and cell in line
            for line in out.splitlines()
            if line.count("│") > 7
        )


def _forecast_run(tmp_path, priced):
    """The elastic records with a forecast at each epoch's end, priced with a profile file the
    run directory holds (calibration-1.json, as an online refit names it)."""
    import shutil

    priced = on_records_cluster(priced)
    pricing = priced[2].model_copy(
        update={"profile": "calibration-1.json", "calibration": "online"}
    )
    forecasts = iter(elastic_forecasts(priced))
    records = [
        r.model_copy(update=dict(forecast=next(forecasts).model_copy(update={"pricing": pricing})))
        if isinstance(r, EpochRecord)
        else r
        for r in elastic_records()
    ]
    run_dir = write_run(tmp_path / "run", records, epochs=EPOCHS)
    shutil.copyfile(PROFILE, run_dir / "calibration-1.json")
    return run_dir


def _edit_second_forecast(run_dir, edit) -> None:
    """`edit` epoch 1's forecast (its second)."""
    import json

    lines = [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines()]
    edit(next(r for r in lines if r["kind"] == "epoch" and r["epoch"] == 1)["forecast"])
    (run_dir / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (
            lambda f: f["cases"][1].update(frozen_layers=[0, 3, 4, 2, 2, 2]),
            "forecast.cases[1].frozen_layers: epoch 3: 2 is not a frozen-layer count in 4..9",
        ),
        (
            lambda f: f["cases"][1].update(frozen_layers=[0, 3, 99, 99, 99, 99]),
            "forecast.cases[1].frozen_layers: epoch 2: 99 is not a frozen-layer count in 3..9",
        ),
        (
            lambda f: f["cases"][0].update(frozen_layers=[4, 4, 4, 4, 4, 4]),
            "forecast.cases[0].frozen_layers [4, 4, 4, 4, 4, 4] does not begin with the epochs "
            "so far, [0, 3]",
        ),
        (
            lambda f: f.update(samples=7),
            "forecast.samples 7, but its 1 step of 64 samples come from 64..127",
        ),
        (
            lambda f: f["pricing"].update(profile_sha256="0" * 64),
            "epoch 1's forecast: pricing.profile_sha256 000000000000… is not the sha256 of "
            "calibration-1.json",
        ),
    ],
    ids=["freezing that falls", "beyond the model", "not the epochs so far", "samples", "sha"],
)
def test_a_forecast_that_contradicts_its_run_is_refused(tmp_path, priced, capsys, edit, fragment):
    """Found by the seventeenth round: report and calibrate took (exit 0) a forecast case that
    unfroze layers ([4, 0]) or froze layer 99 of a 10-layer model, 7 samples for an epoch of
    10 steps of 64, and a pricing sha256 that is not its profile's (the phases' was checked)."""
    from test_hostile import refused

    run_dir = _forecast_run(tmp_path, priced)
    assert cli.main(["report", str(run_dir)]) == 0  # as written, it reads
    capsys.readouterr()
    _edit_second_forecast(run_dir, edit)
    refused(["report", str(run_dir)], tmp_path, capsys, ("run", fragment))


@pytest.mark.parametrize(
    "cluster, fragment",
    [
        ({"nodes": 2, "devices_per_node": 1}, "pricing.cluster.nodes 1, but phase 0"),
        ({"device_memory_bytes": 1000000}, "pricing.cluster.device_memory_bytes 1073741824, but"),
    ],
    ids=["2 nodes x 1 device", "1000000 bytes"],
)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_phases_priced_on_another_cluster_than_their_forecasts_are_refused(
    tmp_path, priced, capsys, cluster, fragment, command
):
    """Found by the fortieth round: every phase record of a local 2-rank run edited to 2 nodes
    x 1 device, or to 1000000 bytes of device memory, was reported and calibrated from (exit
    0, calibrate wrote its --out), while the epochs' forecasts beside them held the cluster
    the run built. A run prices its phases and forecasts on one cluster until a --resume."""
    import json

    from test_hostile import refused

    run_dir = _forecast_run(tmp_path, priced)
    lines = [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines()]
    for line in lines:
        if line["kind"] == "phase":
            line["pricing"]["cluster"].update(cluster)
    (run_dir / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "c.json"
    argv = ["report", str(run_dir)]
    if command == "calibrate":
        argv = ["calibrate", str(run_dir), "--profile", str(PROFILE), "--out", str(out)]
    refused(argv, tmp_path, capsys, ("run.jsonl:9: epoch 0's forecast: ", fragment))
    assert not out.exists()
