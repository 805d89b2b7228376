"""Every phase of a finished elastic run can be re-planned from its run directory alone: the
phase record names the profile file (the one the run started with, or the calibration the
run fitted online), its sha256 and the cluster, and pricing them again gives the same layout."""

import json

import pytest

import cli
from executor.planning import RUN_PROFILE, RunPlanner, replan
from pipeplan.costmodel import CostModel, same_placement
from pipeplan.formats import Horizon, PhaseRecord, Profile, RunConfig, load, read_records
from pipeplan.freeze import list_schedule
from pipeplan.plan import make_plan, profile_identity

ARGS = ["--model", "vit-digits", "--nproc", "2", "--device-memory", "100MiB", "--epochs", "3"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("replan")
    # 10 steps a phase: the run recalibrates itself after 8, so later phases are priced with
    # a profile fitted during the run.
    args = ["run", *ARGS, "--max-steps-per-epoch", "10", "--freeze", "0,5,7"]
    assert cli.main([*args, "--name", "r", "--runs-dir", str(root)]) == 0
    return root / "r"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_each_phase_replans_to_the_same_layout_from_the_run_directory(run_dir, tmp_path):
    # Only the run directory: copied away from everything else first.
    moved = tmp_path / "copy"
    moved.mkdir()
    for path in run_dir.iterdir():
        if path.is_file():
            (moved / path.name).write_bytes(path.read_bytes())
    config = load(RunConfig, moved / "run.json")
    phases = [r for r in read_records(moved / "run.jsonl") if isinstance(r, PhaseRecord)]
    assert len(phases) == 3
    for phase in phases:
        again = replan(moved, phase, config.global_batch)
        assert again.layout == phase.layout
        assert again.predicted_step_s == pytest.approx(phase.predicted_step_s, rel=1e-12)


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_online_calibration_is_written_down_and_named_by_the_phases_it_priced(run_dir):
    phases = [r for r in read_records(run_dir / "run.jsonl") if isinstance(r, PhaseRecord)]
    first, later = phases[0].pricing, [p.pricing for p in phases[1:]]
    assert (first.profile, first.calibration) == (RUN_PROFILE, "none")
    assert all(p.calibration == "online" and p.profile.startswith("calibration-") for p in later)
    for pricing in [first, *later]:
        profile = load(Profile, run_dir / pricing.profile)
        assert profile_identity(profile).sha256 == pricing.profile_sha256
        assert pricing.cluster.num_devices == 2
        assert pricing.cluster.device_memory_bytes == 100 << 20
    # The calibration matters: the starting profile prices phase 1 differently.
    calibrated = load(Profile, run_dir / later[0].profile)
    assert calibrated.calibration is not None
    start = load(Profile, run_dir / RUN_PROFILE)
    layout = phases[1].layout
    before = CostModel(start, first.cluster).evaluate(layout).step_s
    after = CostModel(calibrated, later[0].cluster).evaluate(layout).step_s
    assert after == pytest.approx(phases[1].predicted_step_s, rel=1e-9)
    assert abs(after - before) > 1e-3 * before


def test_a_tampered_profile_is_refused(tmp_path):
    from pipeplan.errors import BadArgumentError

    cfg = RunConfig(name="t", model="vit-digits", data="digits", nproc=2, global_batch=64, epochs=1)
    planner = RunPlanner.from_config(cfg)
    decision = planner(0, Horizon(samples=64, epochs=1, previous=None, cache=False))
    profile = planner.profile.model_copy(update={"created_at": "2000-01-01T00:00:00+00:00"})
    (tmp_path / RUN_PROFILE).write_text(json.dumps(profile.model_dump(mode="json")))
    with pytest.raises(BadArgumentError, match="sha256"):
        replan(tmp_path, decision, cfg.global_batch)


@pytest.mark.parametrize(
    ("frozen", "samples", "moves"), [(3, 640, False), (3, 6400, True), (2, 64000, True)]
)
def test_a_run_decides_a_phase_as_the_plan_does(frozen, samples, moves):
    """vit-digits on 2 ranks of 100 MiB, frozen layers 0, 0, k, k over 4 epochs: the run's
    planner at epoch 2 (2 epochs left, moving from the first phase's layout) chooses what
    `pipeplan plan` chooses for the second phase: cached or not, and a new placement only
    when it pays for itself (here: k = 3 keeps the 2-stage pipeline over 10 steps an epoch,
    moves to 1x2 over 100; k = 2 over 1,000 steps moves to a cached 2-stage split)."""
    cfg = RunConfig(
        name="t",
        model="vit-digits",
        data="digits",
        nproc=2,
        global_batch=64,
        epochs=4,
        device_memory_bytes=100 << 20,
    )
    planner = RunPlanner.from_config(cfg)
    blocks = len(planner.profile.layers) - 2
    first, second = make_plan(
        planner.profile,
        planner.cluster,
        global_batch=64,
        samples=samples,
        epochs=4,
        freeze=list_schedule([0, 0, frozen, frozen], 4, blocks),
    ).phases
    horizon = Horizon(samples=samples, epochs=2, previous=first.layout, cache=True)
    decision = planner(frozen, horizon)
    assert decision.layout == second.layout
    assert decision.predicted_step_s == pytest.approx(second.step_s, rel=1e-6)
    assert same_placement(first.layout, decision.layout) is not moves


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_recalibrated_run_resumes_and_a_later_fit_keeps_the_earlier_ones(run_dir, tmp_path):
    """A run that recalibrated itself passes every check resume makes before a rank starts,
    report included (each calibration-N.json is what its phases name), and the next fit is
    written after the run's last: a resumed run numbered from 1 again, replacing
    calibration-1.json that its earlier phases were priced with, so the run then failed the
    profile check of resume, report and calibrate."""
    import shutil

    from executor.launch import check_resume, resumed_config
    from pipeplan.fileio import CALIBRATION_FILE

    run = tmp_path / "r"
    shutil.copytree(run_dir, run)
    saved = load(RunConfig, run / "run.json")
    cfg = resumed_config(saved, {"epochs": 4})
    check_resume(run, saved, cfg)
    fitted = sorted(p.name for p in run.iterdir() if CALIBRATION_FILE.fullmatch(p.name))
    assert fitted  # the run recalibrated itself
    before = {name: (run / name).read_bytes() for name in fitted}
    planner = RunPlanner.for_run(run, cfg)
    planner.adopt(load(Profile, run / fitted[-1]), run)
    assert planner.profile_file == f"calibration-{len(fitted) + 1}.json"
    assert {name: (run / name).read_bytes() for name in fitted} == before
    assert cli.main(["report", str(run)]) == 0
