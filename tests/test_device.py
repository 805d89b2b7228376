"""Device discipline for CUDA + NCCL, proved where a CPU host can prove it: which device each
collective's tensors must be on, a real 2-rank run that puts every one there, checkpoints that
hold host tensors and load on a CPU-only host whatever device wrote them, one clock whose parts
add up, recalibration that refuses steps whose parts do not, a GPU's memory per rank, only the
stage's layers on the device, the old phase freed before the next is built, and the GPU
acceptance script refusing a host without CUDA. The tests marked `cuda` run on a GPU host
(bench/gpu_check.sh runs them)."""

import gc
import os
import subprocess
import weakref
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.distributed as dist
from torch import nn

from executor import checkpoint
from executor.clock import Clock
from executor.migrate import on_wire
from executor.parallel import place_layers
from executor.topology import backend_device, comm_device
from pipeplan import calibrate
from pipeplan.errors import BadArgumentError
from pipeplan.formats import (
    STEP_RECORDS,
    CheckpointManifest,
    RankTimes,
    RunConfig,
    StepRecord,
    read_records,
)

ROOT = Path(__file__).resolve().parents[1]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# ----------------------------------------------------------------------------- which device


def test_the_backend_names_the_device_of_its_collectives():
    assert backend_device("nccl", 3) == torch.device("cuda", 3)
    assert backend_device("gloo", 3) == torch.device("cpu")
    # A device-mapped group sends device tensors through NCCL; metadata may use its gloo part.
    assert backend_device("cpu:gloo,cuda:nccl", 1) == torch.device("cuda", 1)
    assert backend_device("cpu:gloo", 0) == torch.device("cpu")
    with pytest.raises(ValueError, match="mpi"):
        backend_device("mpi", 0)


def test_comm_device_reads_the_group_backend(single_rank_group):
    assert comm_device() == torch.device("cpu")
    assert comm_device(dist.new_group([0], backend="gloo")) == torch.device("cpu")


def test_a_tensor_goes_on_the_wire_in_place_or_as_a_contiguous_copy_there():
    t = torch.arange(6.0).reshape(2, 3)
    assert on_wire(t, torch.device("cpu")) is t  # already there: no copy
    strided = on_wire(t.t(), torch.device("cpu"))
    assert strided.is_contiguous() and torch.equal(strided, t.t())
    # Another device (meta stands for a GPU here): a copy on it, the original untouched.
    moved = on_wire(t, torch.device("meta"))
    assert moved.device.type == "meta" and t.device.type == "cpu"


# ----------------------------------------------------------------------------- a real run

RUN = dict(
    model="vit-digits",
    data="digits",
    nproc=2,
    global_batch=32,
    epochs=2,
    max_steps_per_epoch=3,
    freeze="list",
    freeze_list=[0, 3],  # a transition at the second epoch
    checkpoint_every=2,
    seed=3,
)
COLLECTIVES = {"all_reduce", "all_gather", "broadcast", "isend", "irecv", "send", "recv"}
COLLECTIVES |= {"reduce", "gather", "scatter", "all_gather_into_tensor", "reduce_scatter_tensor"}


class Watched:
    """`torch.distributed` as the executor's modules see it, except that every collective and
    point-to-point call first checks that each tensor it is given lies on `comm_device` of its
    group, and counts the call."""

    def __init__(self, calls: dict[str, int]):
        self.calls = calls

    def __getattr__(self, name):
        real = getattr(dist, name)
        if name not in COLLECTIVES:
            return real

        def checked(*args, **kwargs):
            want = comm_device(kwargs.get("group"))
            for arg in (*args, *kwargs.values()):
                for tensor in arg if isinstance(arg, list) else [arg]:
                    if isinstance(tensor, torch.Tensor) and tensor.device != want:
                        raise AssertionError(f"{name}: a tensor on {tensor.device}, not {want}")
            self.calls[name] = self.calls.get(name, 0) + 1
            return real(*args, **kwargs)

        return checked


def _watched_rank(rank, world, run_dir, out):
    """A real Trainer on a 2-rank gloo group with its collectives checked and each old phase's
    runtime, optimizer and stage watched through weak references, the garbage collector off:
    reference counting alone must free them before the next phase builds its optimizer."""
    from executor import migrate, parallel, worker
    from executor.planning import RunPlanner

    calls: dict[str, int] = {}
    for module in (worker, parallel, migrate, checkpoint):
        module.dist = Watched(calls)

    class Trainer(worker.Trainer):
        refs: ClassVar[list] = []
        freed: ClassVar[list] = []

        def leave_phase(self, layout):
            old = self.runtime
            if old is not None and old.optimizer is not None:
                self.refs = [weakref.ref(x) for x in (old, old.optimizer, old.module)]
            del old
            return super().leave_phase(layout)

        def make_optimizer(self, params):
            if self.refs:  # the next phase is being built: the old one must be gone already
                self.freed.append([ref() is None for ref in self.refs])
                self.refs = []
            return super().make_optimizer(params)

    cfg = RunConfig.model_validate_json((Path(run_dir) / "run.json").read_text())
    gc.disable()
    try:
        planner = RunPlanner.for_run(Path(run_dir), cfg)
        Trainer(cfg, Path(run_dir), planner, torch.device("cpu")).train()
    finally:
        gc.enable()
    torch.save({"calls": calls, "freed": Trainer.freed}, f"{out}/rank{rank}.pt")


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory, gloo_ranks_module):
    from executor.launch import prepare

    root = tmp_path_factory.mktemp("device")
    run_dir = prepare(RunConfig(name="watched", **RUN), root)
    gloo_ranks_module(_watched_rank, 2, str(run_dir), str(root), deadline_s=240, what="ranks")
    return run_dir, [torch.load(root / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_every_collective_of_a_run_gets_tensors_on_its_group_device(watched_run):
    _, ranks = watched_run
    for result in ranks:
        calls = result["calls"]
        # Step rows, gradient norms and held-out sums; transition and checkpoint moves.
        assert calls.get("all_gather", 0) >= 6 and calls.get("all_reduce", 0) >= 4, calls
        assert calls.get("isend", 0) + calls.get("irecv", 0) > 0, calls


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_old_phase_is_freed_before_the_next_one_is_built(watched_run):
    _, ranks = watched_run
    freed = [flag for result in ranks for flags in result["freed"] for flag in flags]
    assert freed and all(freed), [result["freed"] for result in ranks]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_every_rank_step_time_is_the_sum_of_its_parts(watched_run):
    run_dir, _ = watched_run
    steps = [r for r in read_records(run_dir / "run.jsonl") if isinstance(r, STEP_RECORDS)]
    assert len(steps) == 6
    for step in steps:
        for rank in step.ranks:
            assert rank.step_s > 0 and calibrate.parts_add_up(rank), rank


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_run_checkpoint_holds_every_rank_random_state_and_the_whole_optimizer(watched_run):
    run_dir, _ = watched_run
    manifest, model, optimizer, rng = checkpoint.load_checkpoint(checkpoint.latest(run_dir))
    assert {"0", "1"} <= rng.keys()  # gathered over the host group from both ranks
    trainable = {n for n in model if int(n.split(".")[0]) >= manifest.frozen_layers}
    assert optimizer.keys() == trainable  # rank 1's layers' state came to rank 0's host
    assert all(s["step"].item() > 0 for s in optimizer.values())


# ----------------------------------------------------------------------------- checkpoints


def rewrite_as_if_on_a_gpu(path: Path) -> None:
    """Write a checkpoint's files again the way torch.save writes tensors that lie on cuda:0
    (torch's own serialization registry tags them; not a hand-made file), and record the new
    checksums and sizes in its manifest."""
    import torch.serialization as serialization

    from pipeplan.formats import dumps, load

    def tag(obj):
        return "cuda:0" if obj.device.type == "cpu" else None

    contents = {name: torch.load(path / name, weights_only=True) for name in checkpoint.FILES}
    serialization.register_package(0, tag, lambda obj, location: None)
    try:
        for name, value in contents.items():
            torch.save(value, path / name)
    finally:
        serialization._package_registry[:] = [
            entry for entry in serialization._package_registry if entry[1] is not tag
        ]
    manifest = load(CheckpointManifest, path / "manifest.json")
    files = {name: checkpoint.file_sha256(path / name) for name in checkpoint.FILES}
    sizes = {name: (path / name).stat().st_size for name in checkpoint.FILES}
    written = manifest.model_copy(update={"files": files, "sizes": sizes})
    (path / "manifest.json").write_text(dumps(written))


def _manifest(step: int) -> CheckpointManifest:
    return CheckpointManifest(
        step=step,
        epoch=0,
        step_in_epoch=step,
        phase=0,
        frozen_layers=0,
        grad_history=[],
        # Every step of the epoch summed, as the run writes a mid-epoch checkpoint.
        grad_norm_sums={"0": 1.0} if step else {},
        grad_norm_steps=step,
        world_size=1,
        model="bert-synth",
        config=RunConfig(name="t", model="bert-synth", nproc=1),
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only host")
def test_a_checkpoint_written_on_a_gpu_loads_on_a_cpu_only_host(tmp_path, single_rank_group):
    from conftest import make_layout

    from pipeplan import models

    seq = models.build("bert-synth", dropout=0.0)
    layout = make_layout(8, 0, False, (0, 8), ((0,),), 1, "1f1b")
    opt = torch.optim.AdamW(seq.layers.parameters())
    x, y = seq.example_batch(2, torch.Generator().manual_seed(0))
    seq.loss(seq.forward(x), y).backward()
    opt.step()
    states = {p: dict(s) for p, s in opt.state.items()}
    path = checkpoint.save(tmp_path, seq.layers, layout, states, _manifest(1))
    rewrite_as_if_on_a_gpu(path)
    with pytest.raises(RuntimeError, match="CUDA"):  # the files really claim a GPU
        torch.load(path / "model.pt", weights_only=True)
    _, model, optimizer, rng = checkpoint.load_checkpoint(path)
    names = checkpoint._names(seq.layers)
    assert all(torch.equal(model[names[p]], p.detach()) for p in names)
    assert all(torch.equal(optimizer[names[p]]["exp_avg"], s["exp_avg"]) for p, s in states.items())
    assert rng["0"].device.type == "cpu"


def test_the_random_state_is_restored_from_the_checkpoint(tmp_path, single_rank_group):
    state = dict(checkpoint.rng_states())
    rng = {f"0{kind}": value for kind, value in state.items()}
    expected = torch.rand(4)
    checkpoint.restore_rng(rng, 0, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)


def test_every_torch_load_in_the_project_maps_its_tensors_to_a_device():
    import ast

    sources = [*ROOT.glob("executor/*.py"), *ROOT.glob("pipeplan/**/*.py"), ROOT / "cli.py"]
    loads = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                loads.append((path.name, node.lineno, {k.arg for k in node.keywords}))
    assert loads  # the checkpoint reader at least
    assert all("map_location" in keywords for _, _, keywords in loads), loads


# ----------------------------------------------------------------------------- timing


def test_step_timings_come_from_the_clock_only():
    import ast

    # A host clock around asynchronous CUDA work times the launches, not the work.
    source = (ROOT / "executor" / "parallel.py").read_text()
    calls = {ast.unparse(n.func) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)}
    assert "clock.mark" in calls or "self.clock.mark" in calls
    assert not {c for c in calls if c.startswith("time.")}, calls


def test_the_clock_sums_spans_on_the_host():
    clock = Clock(torch.device("cpu"))
    a = clock.mark()
    sum(range(10_000))
    b = clock.mark()
    clock.sync()
    assert clock.elapsed(a, b) > 0
    assert clock.total([(a, b), (a, b)]) == pytest.approx(2 * clock.elapsed(a, b))


def _rank(step_s: float, **parts: float) -> RankTimes:
    times = dict(fwd_s=0.0, bwd_s=0.0, wait_s=0.0, allreduce_s=0.0, optimizer_s=0.0, input_s=0.0)
    return RankTimes(rank=0, stage=0, replica=0, step_s=step_s, **{**times, **parts})


def test_recalibration_refuses_a_step_whose_parts_do_not_add_up():
    good = _rank(0.100, fwd_s=0.030, bwd_s=0.050, wait_s=0.005, optimizer_s=0.015)
    # What perf_counter around asynchronous CUDA work records: launches in forward and
    # backward, the whole step where the host first waits, and parts that miss the step.
    bad = _rank(0.100, fwd_s=0.002, bwd_s=0.003, optimizer_s=0.060)
    assert calibrate.parts_add_up(good) and not calibrate.parts_add_up(bad)

    def step(rank):
        return StepRecord(
            step=0,
            epoch=0,
            phase=0,
            step_s=0.1,
            loss=1.0,
            samples_per_s=1.0,
            cache_hits=0,
            ranks=[rank],
        )

    assert calibrate.measured(step(good)) and not calibrate.measured(step(bad))


# ----------------------------------------------------------------------------- memory


def _profile(kind: str, memory: int = 141 << 30):
    from executor.planning import profiles_dir
    from pipeplan.formats import Profile, load

    profile = load(Profile, profiles_dir() / "vit-digits@cpu-1t.json")
    device = profile.device.model_copy(update={"kind": kind, "memory_bytes": memory})
    return profile.model_copy(update={"device": device})


def test_a_gpu_rank_may_use_its_whole_gpu_and_cpu_ranks_share_the_host():
    """A rank has the profiled device's memory (a GPU's whole, a CPU host's share), but no
    more than this host's device offers (thirty-second round: `cluster.rank_memory`)."""
    from pipeplan.cluster import host_device_memory, run_cluster

    cfg = RunConfig(name="m", model="vit-digits", nproc=8)
    assert run_cluster(cfg, _profile("cuda", 1 << 30)).device_memory_bytes == 1 << 30
    assert run_cluster(cfg, _profile("cpu", 1 << 30)).device_memory_bytes == (1 << 30) // 8
    here = host_device_memory("cpu")
    assert run_cluster(cfg, _profile("cpu", 1 << 50)).device_memory_bytes == here // 8
    gpu = host_device_memory("cuda")  # None without a GPU: the profile's is all there is
    expected = 1 << 50 if gpu is None else gpu
    assert run_cluster(cfg, _profile("cuda", 1 << 50)).device_memory_bytes == expected


def test_a_profile_of_another_device_kind_is_refused(tmp_path):
    from executor.planning import config_profile
    from pipeplan.formats import dumps

    path = tmp_path / "gpu.json"
    path.write_text(dumps(_profile("cuda")))
    with pytest.raises(BadArgumentError, match="measured on cuda, but this run trains on cpu"):
        config_profile(RunConfig(name="m", model="vit-digits", profile=str(path)))


def test_a_rank_holds_only_its_stage_on_its_device():
    layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(5))
    place_layers(layers, range(2, 4), torch.device("meta"))  # meta stands for the GPU
    where = [layer.weight.device.type for layer in layers]
    assert where == ["cpu", "cpu", "meta", "meta", "cpu"]


@cuda
def test_a_stage_moves_to_its_gpu_and_back_keeping_its_parameters():
    layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
    weight = layers[1].weight  # optimizer state is keyed by the parameter object
    place_layers(layers, range(1, 2), torch.device("cuda", 0))
    assert layers[1].weight is weight and weight.device.type == "cuda"
    assert layers[0].weight.device.type == "cpu"
    place_layers(layers, range(0), torch.device("cuda", 0))
    assert layers[1].weight is weight and weight.device.type == "cpu"


# ----------------------------------------------------------------------------- the GPU check


def readme_gpu_check() -> list[str]:
    """The README's GPU check command, as written in its sh block."""
    import re

    text = (ROOT / "README.md").read_text()
    lines = [
        line.strip()
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)
        for line in block.splitlines()
        if "gpu_check.sh" in line
    ]
    assert lines == ["bench/gpu_check.sh"], lines
    return lines[0].split()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host without CUDA")
def test_the_gpu_check_refuses_a_host_without_cuda_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPU_CHECK_DIR": str(tmp_path / "out")}
    done = subprocess.run(
        readme_gpu_check(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "pipeplan: error: bench/gpu_check.sh needs a CUDA device; torch sees none here"
    ]
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


# ----------------------------------------------------------------------------- on a GPU


@cuda
@pytest.mark.timeout(300)
def test_the_profiler_holds_one_layer_at_a_time_on_the_gpu():
    from pipeplan import models
    from pipeplan.profiler import profile_layers

    seq = models.build("bert-synth", dropout=0.0)
    on_gpu: list[list[int]] = []  # at each layer call: the layers with parameters on the GPU

    def watch(module, args):
        on_gpu.append(
            [
                i
                for i, layer in enumerate(seq.layers)
                if any(p.device.type == "cuda" for p in layer.parameters())
            ]
        )

    handles = [layer.register_forward_pre_hook(watch) for layer in seq.layers]
    try:
        profile = profile_layers(seq, device="cuda", micro_batches=[2, 4], warmup=1, repeats=2)
    finally:
        for handle in handles:
            handle.remove()
    assert all(t.feasible for layer in profile.layers for t in layer.timings)
    assert on_gpu and all(len(layers) == 1 for layers in on_gpu), on_gpu[:5]
    assert {layers[0] for layers in on_gpu} == set(range(len(seq.layers)))
    assert all(p.device.type == "cpu" for p in seq.layers.parameters())  # and back after


@cuda
def test_comm_device_under_nccl_is_this_rank_gpu(tmp_path):
    from pipeplan.spawn import free_port

    os.environ.setdefault("LOCAL_RANK", "0")
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        assert comm_device() == torch.device("cuda", 0)
        t = torch.ones(3, device=comm_device())
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_a_rank_peak_memory_travels_in_its_step_row():
    from executor.parallel import StepTimes
    from executor.records import step_record, step_row

    rows = [
        step_row(StepTimes(step_s=1.0, fwd_s=1.0, peak_memory_bytes=(1 << 40) + 7), 0, 0, 0),
        step_row(StepTimes(step_s=1.0, fwd_s=1.0), 0, 1, 0),  # CPU: no peak to report
    ]
    record = step_record(rows, step=0, epoch=0, phase=0, global_batch=8)
    assert [r.peak_memory_bytes for r in record.ranks] == [(1 << 40) + 7, None]
