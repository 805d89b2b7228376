"""Shared fixtures: one thread per test, claims released as a test ends, the distributed
set-up every multi-process test uses (`gloo_ranks`, `single_rank_group`), and small record
builders."""

import gc

# The session's imports (torch, transformers, the test modules: some 1M objects that live as
# long as the worker) with the cyclic collector off, then frozen out of its later passes once
# collected (`pytest_collection_finish`): every full pass of a worker's session traversed them
# again, ~15 % of a file's CPU (test_hostile_inputs.py: 109 s of CPU before, 92.5 s after,
# 2026-12-06). pytest-xdist's controller collects nothing: its collector is back on at the
# session's start (`pytest_sessionstart`); a process a test spawns, which imports this module
# with its test's, keeps its collector.
import multiprocessing

if multiprocessing.parent_process() is None:
    gc.disable()


import os
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from pipeplan import spawn
from pipeplan.startup import ignored


# A signal ignored where the suite starts (a shell's background job ignores SIGINT and
# SIGQUIT, `nohup` SIGHUP) would stay ignored in every command a test starts, as pipeplan
# leaves an inherited SIG_IGN alone (`startup.ignored`): the tests that stop commands with
# them need the defaults, so the suite behaves the same however it was started.
def _signals_as_started() -> list[str]:
    """The stop signals set back to their defaults where this process ignores (SIG_IGN) or
    blocks them; what was changed, by name."""
    from pipeplan.startup import SIGNALS

    changed = []
    for signum in ignored():
        default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, default)
        changed.append(f"{signal.Signals(signum).name} ignored")
    blocked = set(SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        changed += sorted(f"{signal.Signals(s).name} blocked" for s in blocked)
    return changed


_signals_as_started()

# Bytecode in one folder of its own (PYTHONPYCACHEPREFIX), not beside the sources: a data
# module a test writes and a run imports left __pycache__/ beside it, and every test that holds
# its folder unchanged failed (Python writes bytecode unless PYTHONDONTWRITEBYTECODE is set,
# as some machines set it and a user's does not). Every process of the session shares it, so
# each compiles pipeplan's modules once.
if not sys.flags.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ:
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = str(
        Path(tempfile.gettempdir()) / f"pipeplan-tests-bytecode-{os.getuid()}"
    )

# The longest files first, longest first: with `--no-loadscope-reorder` pytest-xdist hands a
# file to a worker as it runs out of work, in the order they come (by default, the files of the
# most tests first: the demo's one test of several minutes started last and was the suite's
# tail). Longest first leaves the short files to even out the workers' ends. By CPU seconds
# of a default run (2026-12-06, a per-test rusage timeline of the whole suite); the rest after
# these, in name order.
FIRST = (
    "test_hostile_data.py",  # ~320 s
    "test_launch.py",  # ~215 s
    "test_hostile_resume.py",  # ~200 s
    "test_demo.py",  # ~180 s, one test
    "test_hostile_runs.py",  # ~155 s
    "test_hostile.py",  # ~117 s
    "test_hostile_inputs.py",  # ~83 s
    "test_readme.py",  # ~69 s
    "test_api.py",
    "test_solver.py",
    "test_plan.py",
    "test_hostile_console.py",
    "test_cli.py",
    "test_finetune.py",
    "test_calibrate.py",
    "test_forecast.py",
    "test_parallel.py",
    "test_equivalence.py",
    "test_plots.py",
    "test_hostile_files.py",
    "test_checkpoint.py",
    "test_autocache.py",
    "test_device.py",
    "test_replan.py",
    "test_data.py",  # ~17 s
)


def pytest_collection_modifyitems(config, items):
    rank = {name: n for n, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable within a file
    # A `-m` given replaces pyproject's `-m 'not long'`: `-m "not multiprocess"`, the README's
    # quick run, took in the long tests that start no ranks (minutes more). Unless the
    # expression names them (`-m long`), or is empty (`-m ""`: every test), they stay out.
    expression = config.option.markexpr
    if expression and "long" not in expression:
        long = [item for item in items if item.get_closest_marker("long")]
        if long:
            config.hook.pytest_deselected(items=long)
            items[:] = [item for item in items if not item.get_closest_marker("long")]


@pytest.fixture(autouse=True)
def _signals_left_as_found(request):
    # CI's run of the fifty-eighth session: three tests that stop a command with SIGINT found
    # it not taken (the command went on), though the tests before them in that worker had
    # stopped commands with it; no test of a full local run changed a handler. Whatever left
    # SIGINT ignored or blocked in the worker is named, and the signals set back, so that one
    # test's leftover fails no other.
    yield
    if changed := _signals_as_started():
        warnings.warn(f"{request.node.nodeid} left {', '.join(changed)}", stacklevel=1)


@pytest.fixture(autouse=True)
def _one_thread():
    # The executor runs one intra-op thread per rank; tests do the same and stay repeatable.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _claims_end_with_the_test():
    # A command's claims on run directories last its process's life; in the suite a test's end
    # is that end. pytest reuses a passing test's tmp_path, so a claim kept past it would be
    # taken for the next test's own folder at that path.
    from pipeplan.fileio import claims_released

    with claims_released():
        yield


@pytest.fixture
def gloo_ranks():
    """`gloo_ranks(fn, nproc, *args, deadline_s=…)` runs `fn(rank, world, *args)` on `nproc`
    spawned CPU ranks in one gloo process group (every collective times out after 60 s, the
    whole run after `deadline_s`); `fn` must be a module-level function."""

    def run(fn, nproc, *args, deadline_s=300.0, what="test ranks"):
        spawn.run_gloo_ranks(fn, nproc, args, deadline_s=deadline_s, what=what)

    return run


@pytest.fixture(scope="module")
def gloo_ranks_module():
    """`gloo_ranks` for module-scoped fixtures."""

    def run(fn, nproc, *args, deadline_s=300.0, what="test ranks"):
        spawn.run_gloo_ranks(fn, nproc, args, deadline_s=deadline_s, what=what)

    return run


# A real run's flags: 1 rank, 1 epoch of 2 steps.
FINISHED = ["--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "2"]


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A real run (FINISHED), finished with its final checkpoint: what `--resume` reads.
    Made once per test process (each pytest-xdist worker), not once per module: test_hostile
    and the test_hostile_* files read it. Each test resumes or edits a copy (`copy_run`);
    what reads the run itself (export, report) changes none of its files: checked at the
    end of the session, as no test may leave it changed for the next file's."""
    import cli

    root = tmp_path_factory.mktemp("finished")
    assert cli.main(["run", *FINISHED, "--name", "r", "--runs-dir", str(root)]) == 0
    made = _files(root / "r")
    yield root / "r"
    assert _files(root / "r") == made, "a test changed the shared finished_run"


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture
def single_rank_group():
    """A one-rank gloo process group in the test's own process."""
    with spawn.single_rank_group(collective_timeout_s=30):
        yield


def fake_pricing(devices: int = 2, model: str = "vit-digits"):
    """A phase record's pricing for hand-made run records: the shipped CPU profile of `model`
    on a local cluster of `devices` ranks. Their run directory carries it
    (`write_fake_profile`), as a run's does: report and calibrate refuse a priced profile
    missing."""
    from executor.planning import shipped_profile
    from pipeplan.cluster import cluster_from_flags
    from pipeplan.formats import Pricing, Profile, load
    from pipeplan.formats.profile import profile_sha256

    profile = load(Profile, shipped_profile(model, "cpu"))
    return Pricing(
        source="solver",
        profile="profile.json",
        profile_sha256=profile_sha256(profile),
        calibration="none",
        # The links a run builds from its profile (`costmodel.check_priced_links` holds them).
        cluster=cluster_from_flags(
            nodes=1, devices_per_node=devices, device_memory=1 << 30, profile=profile
        ),
    )


def priced(record, profile=None, *, fill: bool = False):
    """`record` (a hand-made PhaseRecord) with the predictions a run records for its layout:
    what the layout prices to (`CostModel.evaluate`, its stages as `plan.stage_plans` writes
    them) from `profile`, else the shipped CPU profile its pricing names by sha256
    (`fake_pricing`'s), on its pricing.cluster. Each prediction it has is replaced, none
    added unless `fill` (then both, as a run records them): report and calibrate refuse a
    prediction that is not its layout's (`costmodel.check_priced_prediction`).

        record = priced(PhaseRecord(..., predicted_step_s=0.1, pricing=fake_pricing(2)))
    """
    from executor.planning import profiles_dir
    from pipeplan.costmodel import CostModel
    from pipeplan.formats import Profile, load
    from pipeplan.formats.profile import profile_sha256
    from pipeplan.plan import stage_plans

    if profile is None:
        shipped = (load(Profile, path) for path in sorted(profiles_dir().glob("*@cpu-1t*.json")))
        want = record.pricing.profile_sha256
        profile = next(p for p in shipped if profile_sha256(p) == want)
    evaluation = CostModel(profile, record.pricing.cluster).evaluate(record.layout, record=False)
    update = {}
    if fill or record.predicted_step_s is not None:
        update["predicted_step_s"] = evaluation.step_s
    if fill or record.predicted_stages is not None:
        update["predicted_stages"] = stage_plans(evaluation.stages)
    return record.model_copy(update=update)


def write_fake_profile(run_dir: Path, model: str = "vit-digits") -> None:
    """The profile `fake_pricing(devices, model)` names, in hand-made `run_dir` as a run
    writes it.

    write_fake_profile(tmp_path / "run")
    """
    import shutil

    from executor.planning import shipped_profile

    # A model pipeplan ships no profile of (a test's odd name) is priced as vit-digits.
    shipped = shipped_profile(model, "cpu") or shipped_profile("vit-digits", "cpu")
    shutil.copyfile(shipped, Path(run_dir) / "profile.json")


def make_layout(global_batch, frozen_layers, cached, boundaries, rank_map, micro_batches, schedule):
    """A Layout from the parts a test names, its micro-batch size from the global batch."""
    from pipeplan.formats import Layout

    return Layout(
        frozen_layers=frozen_layers,
        cached=cached,
        micro_batches=micro_batches,
        micro_batch_size=global_batch // (len(rank_map) * micro_batches),
        schedule=schedule,
        boundaries=tuple(boundaries),
        rank_map=tuple(tuple(row) for row in rank_map),
    )


def pinned_plan(
    path: Path,
    layouts: list,
    freeze: list[int],
    *,
    epochs: int,
    cache: bool = True,
    cache_budget: str | None = None,
    device_memory: str = "100MiB",
) -> str:
    """A plan file for `pipeplan run --plan` on 2 vit-digits ranks (`device_memory` each,
    global batch of the layouts) whose phases run `layouts` (one per frozen count of
    `freeze`) as they are: `pipeplan plan` writes the rest, its layouts replaced and priced
    again (`priced_phases`). A run that must cover a given layout or transition then does not
    depend on the planner's choice (which keeps a layout whose freezing leaves stage 0
    forward-only when a move does not pay over a short run). A run of it follows `freeze`
    with the plan's `cache` and `cache_budget` (`pipeplan plan --no-cache`, `--cache-budget`):
    those flags are the plan's."""
    import itertools
    import json

    import cli
    from executor.planning import shipped_profile
    from pipeplan.formats import Plan, Profile, dumps, load, parse
    from pipeplan.plan import priced_phases

    batch = layouts[0].global_batch
    argv = ["plan", "--profile", str(shipped_profile("vit-digits", "cpu")), "--samples", "1438"]
    argv += ["--devices-per-node", "2", "--device-memory", device_memory]
    argv += ["--global-batch", str(batch)]
    argv += ["--epochs", str(epochs), "--freeze-schedule", ",".join(map(str, freeze))]
    argv += [] if cache else ["--no-cache"]
    argv += [] if cache_budget is None else ["--cache-budget", cache_budget]
    assert cli.main([*argv, "--out", str(path)]) == 0
    plan = json.loads(path.read_text())
    pinned = {layout.frozen_layers: layout for layout in layouts}
    for phase in plan["phases"]:
        layout = pinned[phase["layout"]["frozen_layers"]]
        phase["layout"] = layout.model_dump(mode="json")
        # Placeholders (no time holds a step up) until the layouts are priced below, as the
        # planner prices them: a run refuses a plan whose predictions are not its layouts'
        # (`check_plan_prices`).
        template = {k: 0.0 if k.endswith("_s") else v for k, v in phase["stages"][0].items()}
        cuts = itertools.pairwise(layout.boundaries)
        phase["stages"] = [{**template, "first_layer": a, "stop_layer": b} for a, b in cuts]
    edited = parse(Plan, json.dumps(plan))
    phases = priced_phases(edited, load(Profile, shipped_profile("vit-digits", "cpu")))
    total = sum(phase.total_s for phase in phases)
    path.write_text(dumps(edited.model_copy(update={"phases": phases, "predicted_total_s": total})))
    return str(path)


def rank_processes(run_dir: Path) -> dict[int, int]:
    """rank → pid of the live rank processes of `run_dir` (`-m executor.launch RUN_DIR`,
    whichever launcher started them, RUN_DIR relative to their working directory or not)."""
    found, wanted = {}, Path(run_dir).resolve()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
            if "executor.launch" not in argv:
                continue
            cwd = Path(os.readlink(entry / "cwd"))
            if all(
                (cwd / arg).resolve() != wanted for arg in argv[argv.index("executor.launch") :]
            ):
                continue
            environ = (entry / "environ").read_bytes().decode().split("\0")
            env = dict(line.split("=", 1) for line in environ if "=" in line)
            found[int(env["RANK"])] = int(entry.name)
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            continue
    return found


def with_links(path: Path) -> Path:
    """`path`, a profile `pipeplan profile` wrote without --nproc (quicker), given the links
    the shipped bert-tiny CPU profile measured (`comm`), as `--nproc 2` adds them: a run of 2
    ranks on it prices measured links, and does not warn that they are a GPU's defaults (the
    sixty-fourth round's warning), as the tests reading its lines expect.

        profile = with_links(tmp_path / "p.json")
    """
    from executor.planning import shipped_profile
    from pipeplan.formats import Profile, dumps, load

    comm = load(Profile, shipped_profile("bert-tiny", "cpu")).comm
    path.write_text(dumps(load(Profile, path).model_copy(update={"comm": comm})))
    return path


def pytest_sessionstart(session):
    if getattr(session.config.option, "numprocesses", None) and not hasattr(
        session.config, "workerinput"
    ):
        gc.enable()  # pytest-xdist's controller: it collects no tests


def pytest_collection_finish(session):
    gc.freeze()
    gc.enable()
