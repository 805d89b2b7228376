"""Measure every layer of a LayerSequence on the actual device: time and memory.

For each layer and micro-batch size: forward (with autograd recording), backward, and
forward-only (no-grad, what a frozen layer costs) times; parameters; output bytes; bytes saved
for backward (counted with `saved_tensors_hooks`, so it works on CPU too); on CUDA the peak
memory above what was allocated before the forward. Timing is made for shared machines:
warm-up rounds, then repeats interleaved across layers and sizes so that a slow spell of a shared
machine hits all layers alike; medians and interquartile ranges are recorded.

On a GPU one layer at a time is on the device (with its inputs): the model stays on the host,
so a model that needs a pipeline because it does not fit one GPU can be profiled. Repeats are
then interleaved across sizes within a layer (a GPU is not shared with other jobs the way
CPU cores are, and moving layers per measurement would cost more than the measurement).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError

from pipeplan import precision as mixed
from pipeplan.errors import BadArgumentError, PipeplanError, excerpt, one_line, quoted
from pipeplan.formats import (
    PRECISION_DTYPE,
    DeviceInfo,
    LayerProfile,
    MicroBatchTiming,
    ModelInfo,
    Precision,
    Profile,
    ProfileSettings,
    dumps,
)
from pipeplan.formats.base import TooLargeToRead, first_error
from pipeplan.formats.presets import config_path, model_argument
from pipeplan.formats.profile import hidden_state_bytes, timing_problem
from pipeplan.inputs import DEFAULT_MICRO_BATCH_SIZES, ProfileRequest
from pipeplan.models import LayerSequence, memory_limit

Progress = Callable[[int, int], None]


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


# --------------------------------------------------------------------------- timing


class Timer:
    """Measures an interval on the device: perf_counter on CPU, CUDA events on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    @contextmanager
    def interval(self, out: list[float]) -> Iterator[None]:
        if self.cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            stop.record()
            stop.synchronize()
            out.append(start.elapsed_time(stop) / 1e3)
        else:
            t0 = time.perf_counter()
            yield
            out.append(time.perf_counter() - t0)


# How many more times `LayerProfiler.settle` measures a layer whose timings break a rule of
# the profile's format before it gives up: a spike is rare, two in a row at one cell rarer.
MEASURE_AGAIN = 3


@dataclass
class _Cell:
    """Measurements of one (layer, micro-batch) pair."""

    fwd: list[float] = field(default_factory=list)
    bwd: list[float] = field(default_factory=list)
    nograd: list[float] = field(default_factory=list)
    peak: int | None = None
    error: str | None = None


def _median_iqr(values: list[float]) -> tuple[float, float]:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float(med), float(q3 - q1)


# --------------------------------------------------------------------------- saved bytes


def saved_bytes(fn: Callable[[], torch.Tensor], exclude: set[int]) -> int:
    """Bytes of distinct tensor storages autograd saves for backward while running `fn`,
    leaving out storages in `exclude` (parameters: they exist anyway)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in exclude and ptr != 0:
            seen[ptr] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares y = fixed + slope·x, clipped to non-negative parts."""
    if len(set(xs)) == 1:
        return 0.0, ys[0] / xs[0]
    slope, fixed = np.polyfit(np.array(xs, float), np.array(ys, float), 1)
    if fixed < 0:  # force through the origin rather than report negative memory
        slope, fixed = float(np.dot(xs, ys) / np.dot(xs, xs)), 0.0
    return max(float(fixed), 0.0), max(float(slope), 0.0)


# --------------------------------------------------------------------------- the profiler


def device_info(device: torch.device, threads: int) -> DeviceInfo:
    import transformers

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, memory, count = props.name, props.total_memory, torch.cuda.device_count()
    else:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                name = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
        except (OSError, StopIteration):
            pass
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        count = 1
    return DeviceInfo(
        kind=device.type,
        name=one_line(name),  # a device's own name, recorded as Text
        memory_bytes=memory,
        threads=threads,
        count=count,
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        python_version=platform.python_version(),
        hostname=socket.gethostname(),
    )


def resolve_device(name: str) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise BadArgumentError("--device cuda: no CUDA device is available here")
        return torch.device("cuda", torch.cuda.current_device())
    raise BadArgumentError(f"unknown device {quoted(name)}; use cpu or cuda")


class LayerProfiler:
    """Holds one model on one device and measures its layers."""

    def __init__(
        self,
        seq: LayerSequence,
        device: torch.device,
        micro_batches: list[int],
        seed: int = 0,
        precision: Precision = "fp32",
    ):
        self.seq = seq
        self.device = device
        self.precision = precision
        self.sizes = micro_batches
        self.timer = Timer(device)
        self.host = torch.device("cpu")
        self.layers = seq.layers.to(self.host).train()
        self.resident: int | None = None  # the layer on the device (all of them on the host)
        self.device_inputs: dict[int, torch.Tensor] = {}  # its inputs there, per size
        gen = torch.Generator().manual_seed(seed)
        # Real inputs for every layer: the previous layers' outputs on one random batch.
        self.inputs: dict[int, list[torch.Tensor]] = {}
        self.labels: dict[int, torch.Tensor] = {}
        self.grads: dict[tuple[int, int], torch.Tensor] = {}
        self.logits_bytes: dict[int, int] = {}  # per micro-batch size: the head's output
        self.cells = {(i, m): _Cell() for m in self.sizes for i in range(len(self.layers))}
        kept, limit, per_sample = 0, memory_limit(), self._kept_bytes_per_sample()
        for m in self.sizes:
            # The inputs kept for every layer and size are a floor of the memory a size takes:
            # beyond this process's memory, it is recorded as infeasible unallocated (without
            # a ulimit, Linux lends the pages and its OOM killer ends the profile, or another
            # process; twenty-fourth round: --micro-batch-sizes 1,1048576 took 24 GB).
            need = m * per_sample
            if limit is not None and kept + need > limit[0]:
                self._mark_infeasible(
                    m,
                    range(len(self.layers)),
                    MemoryError(
                        f"its layers' inputs alone take {need / 2**30:,.1f} GiB, beyond "
                        f"{(limit[0] - kept) / 2**30:,.1f} GiB left ({limit[1]})"
                    ),
                )
                self.inputs[m] = []
                continue
            kept += need
            x, y = seq.example_batch(m, gen)
            self.labels[m] = y.to(device)
            self.inputs[m] = []
            x = x.to(device)
            try:
                # Each layer's input as it arrives over a stage boundary: in the precision's
                # boundary dtype (bfloat16 under bf16, so out_bytes count what is sent),
                # computed on in float32 as a stage does; the logits as the loss takes them.
                with torch.no_grad(), mixed.compute(device, precision):
                    for i, layer in enumerate(self.layers):
                        self.inputs[m].append(x.to(self.host))
                        self.make_resident(i)
                        x = layer(mixed.received(x, precision))
                        last = i == len(self.layers) - 1
                        x = x.float() if last else mixed.boundary(x, precision)
                self.logits_bytes[m] = x.numel() * x.element_size()
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                self._mark_infeasible(m, range(len(self.inputs[m]) - 1, len(self.layers)), exc)
                self._free()
            del x
        self.make_resident(None)

    def _kept_bytes_per_sample(self) -> int:
        """Bytes per sample of the inputs kept for layers 1..n-1 (hidden states, in the
        boundary dtype); 0 where the config does not say its size."""
        model = ModelInfo(**self.seq.describe(), dtype=PRECISION_DTYPE[self.precision])
        return (len(self.layers) - 1) * (hidden_state_bytes(model) or 0)

    def make_resident(self, i: int | None) -> None:
        """Layer i (None: no layer) and its inputs on the device, the layer before back on the
        host. Nothing moves on CPU, where the host is the device."""
        if i == self.resident or self.device == self.host:
            self.resident = i
            return
        if self.resident is not None:
            self.layers[self.resident].to(self.host)
            self.grads = {key: g for key, g in self.grads.items() if key[0] != self.resident}
        self.device_inputs = {}
        self._free()
        self.resident = i
        if i is not None:
            self.layers[i].to(self.device)
            self.device_inputs = {
                m: xs[i].to(self.device) for m, xs in self.inputs.items() if i < len(xs)
            }

    def order(self, rounds: int) -> Iterator[tuple[int, int, int]]:
        """(round, micro-batch, layer) in measuring order: interleaved across layers on the
        host, layer by layer on a device (one layer resident at a time)."""
        n = len(self.layers)
        if self.device == self.host:
            yield from ((r, m, i) for r in range(rounds) for m in self.sizes for i in range(n))
        else:
            yield from ((r, m, i) for i in range(n) for r in range(rounds) for m in self.sizes)

    def _mark_infeasible(self, m: int, layers: range, exc: BaseException) -> None:
        # Recorded in the profile's Text field: a tab or escape in torch's message is a space.
        reason = one_line(f"out of memory: {excerpt(str(exc).splitlines()[0])}")
        for i in layers:
            self.cells[i, m].error = reason

    def _free(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _run(self, i: int, m: int, with_grad: bool) -> torch.Tensor:
        x = self.device_inputs[m] if self.device != self.host else self.inputs[m][i]
        if with_grad and x.is_floating_point():
            x = x.detach().requires_grad_(True)  # stage inputs need input-gradients
        with mixed.compute(self.device, self.precision):
            out = self.layers[i](mixed.received(x, self.precision))  # as a stage takes it in
        if i == len(self.layers) - 1:  # the loss in float32, as the executor computes it
            return self.seq.loss(out.float(), self.labels[m])
        # What leaves the layer when a stage ends here: the cast is part of its cost.
        return mixed.boundary(out, self.precision)

    def _grad_for(self, i: int, m: int, out: torch.Tensor) -> torch.Tensor | None:
        if out.dim() == 0:
            return None
        key = (i, m)
        if key not in self.grads:
            self.grads[key] = torch.randn_like(out)
        return self.grads[key]

    def measure_once(self, i: int, m: int, record: bool) -> None:
        """One forward, backward and no-grad forward of layer i at micro-batch m."""
        cell = self.cells[i, m]
        if cell.error:
            return
        fwd, bwd, nograd = ([], [], []) if not record else (cell.fwd, cell.bwd, cell.nograd)
        layer = self.layers[i]
        cuda = self.device.type == "cuda"
        try:
            if cuda:
                torch.cuda.synchronize(self.device)
                base = torch.cuda.memory_allocated(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            with self.timer.interval(fwd):
                out = self._run(i, m, with_grad=True)
            grad = self._grad_for(i, m, out)
            with self.timer.interval(bwd):
                out.backward(grad)
            if cuda and record:
                peak = torch.cuda.max_memory_allocated(self.device) - base
                cell.peak = max(cell.peak or 0, peak)
            del out
            layer.zero_grad(set_to_none=True)
            with torch.no_grad(), self.timer.interval(nograd):
                self._run(i, m, with_grad=False)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            layer.zero_grad(set_to_none=True)
            self._mark_infeasible(m, range(i, i + 1), exc)
            self._free()

    def saved_bytes(self, i: int, m: int) -> int | None:
        if self.cells[i, m].error:
            return None
        # Parameters exist anyway: their storages (where they are now) are not counted.
        params = {p.untyped_storage().data_ptr() for p in self.layers[i].parameters()}
        nbytes = saved_bytes(lambda: self._run(i, m, with_grad=True), params)
        self.layers[i].zero_grad(set_to_none=True)
        return nbytes

    def out_bytes_per_sample(self, i: int) -> int:
        last = i + 1 == len(self.layers)
        for m in self.sizes:
            if not last and not self.cells[i, m].error:
                nxt = self.inputs[m][i + 1]
                return nxt.numel() * nxt.element_size() // m
            if last and m in self.logits_bytes:
                return self.logits_bytes[m] // m
        # Nothing ran at any size (out of memory at each): what the layer would output, as the
        # profile's format holds it to the config (the hidden state; the head's float32
        # logits, a causal LM's per token). Found by the twentieth round: every layer got the
        # logits' bytes, and the profiler's own profile was refused in a traceback.
        if not last:
            model = ModelInfo(**self.seq.describe(), dtype=PRECISION_DTYPE[self.precision])
            hidden = hidden_state_bytes(model)
            if hidden is not None:
                return hidden
        return math.prod(self.seq.logits_shape) * 4

    def settle(
        self, layers: list[LayerProfile], settings: ProfileSettings, device: DeviceInfo
    ) -> list[LayerProfile]:
        """`layers` with each layer whose timings break a rule of the profile's format
        (`formats.profile.timing_problem`: a larger micro-batch 100× faster than a smaller
        one, a no-grad forward far slower than with autograd) measured again at the sizes
        concerned, up to MEASURE_AGAIN times. Found by the fifty-first round: one scheduler
        spike of 7 ms beside a 0.05 ms layer, on a shared 2-core machine, broke a rule, and
        the profiler's own profile was a traceback."""
        settled = list(layers)
        rounds = settings.warmup + settings.repeats
        for i, layer in enumerate(layers):
            problem, again = timing_problem(layer, settings, device), 0
            while problem is not None:
                if again == MEASURE_AGAIN:
                    raise PipeplanError(
                        f"{problem[1]} (measured {again + 1} times): the device is too busy "
                        "to time this layer; profile on an idle one, or give more --repeats"
                    )
                self.make_resident(i)
                for m in problem[0]:
                    self.cells[i, m] = _Cell(error=self.cells[i, m].error)  # afresh
                    for rep in range(rounds):
                        self.measure_once(i, m, record=rep >= settings.warmup)
                settled[i], again = self._layer_profile(i), again + 1
                problem = timing_problem(settled[i], settings, device)
        self.make_resident(None)
        return settled

    def run(
        self, warmup: int, repeats: int, progress: Progress | None = None
    ) -> list[LayerProfile]:
        n = len(self.layers)
        total = (warmup + repeats) * n * len(self.sizes)
        for done, (rep, m, i) in enumerate(self.order(warmup + repeats), start=1):
            self.make_resident(i)
            self.measure_once(i, m, record=rep >= warmup)
            if progress:
                progress(done, total)
        profiles = []
        for i in range(n):
            self.make_resident(i)
            profiles.append(self._layer_profile(i))
        self.make_resident(None)
        return profiles

    def _layer_profile(self, i: int) -> LayerProfile:
        layer = self.layers[i]
        params = sum(p.numel() for p in layer.parameters())
        param_bytes = sum(p.numel() * p.element_size() for p in layer.parameters())
        saved = [(m, self.saved_bytes(i, m)) for m in self.sizes]
        saved = [(m, b) for m, b in saved if b is not None]
        fixed, per_sample = (
            _fit_line([m for m, _ in saved], [b for _, b in saved])
            if saved
            else (
                0.0,
                0.0,
            )
        )
        timings = []
        for m in self.sizes:
            cell = self.cells[i, m]
            if cell.error:
                timings.append(MicroBatchTiming(micro_batch=m, feasible=False, error=cell.error))
                continue
            (f, fs), (b, bs), (g, gs) = map(_median_iqr, (cell.fwd, cell.bwd, cell.nograd))
            timings.append(
                MicroBatchTiming(
                    micro_batch=m,
                    fwd_s=f,
                    fwd_spread_s=fs,
                    bwd_s=b,
                    bwd_spread_s=bs,
                    fwd_nograd_s=g,
                    fwd_nograd_spread_s=gs,
                    peak_mem_bytes=cell.peak,
                )
            )
        return LayerProfile(
            index=i,
            name=self.seq.layer_name(i),
            kind=self.seq.kind(i),
            params=params,
            param_bytes=param_bytes,
            out_bytes_per_sample=self.out_bytes_per_sample(i),
            saved_bytes_per_sample=per_sample,
            saved_bytes_fixed=fixed,
            timings=timings,
        )


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def profile_layers(
    seq: LayerSequence,
    *,
    device: str = "cpu",
    micro_batches: tuple[int, ...] | list[int] = DEFAULT_MICRO_BATCH_SIZES,
    warmup: int = 2,
    repeats: int = 5,
    threads: int = 1,
    seed: int = 0,
    precision: Precision = "fp32",
    progress: Progress | None = None,
) -> Profile:
    """Profile every layer of `seq` in `precision`; returns a Profile without link
    measurements."""
    if warmup < 0 or repeats < 1 or threads < 1:
        raise BadArgumentError("need warmup ≥ 0, repeats ≥ 1 and threads ≥ 1")
    if not micro_batches or min(micro_batches) < 1:
        raise BadArgumentError("micro-batch sizes must be positive integers")
    dev = resolve_device(device)
    with torch_threads(threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        profiler = LayerProfiler(seq, dev, sorted(set(micro_batches)), seed, precision)
        layers = profiler.run(warmup, repeats, progress)
        settings = ProfileSettings(
            micro_batches=sorted(set(micro_batches)), warmup=warmup, repeats=repeats, seed=seed
        )
        device_said = device_info(dev, threads)
        layers = profiler.settle(layers, settings, device_said)
    try:
        return Profile(
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            model=ModelInfo(**seq.describe(), dtype=PRECISION_DTYPE[precision]),
            device=device_said,
            settings=settings,
            layers=layers,
        )
    except ValidationError as exc:  # what `settle` cannot measure away: one line, not a trace
        raise PipeplanError(
            f"the measured profile breaks its format's rules ({first_error(exc)}); profile "
            "again, on an idle device"
        ) from exc


def profile_to_file(
    request: ProfileRequest, progress: Progress | None = None, *, run_owned: bool = False
) -> Profile:
    """`pipeplan profile`: validate everything cheap first, then measure, then write
    atomically, so a bad argument or an interruption never leaves a partial file.
    `run_owned`: the profile is a run's own file (the demo's `demo-pretrained/model-profile.json`),
    written inside its run directory, where a user's output is refused."""
    from pipeplan import links, models
    from pipeplan.fileio import check_writable, write_atomic
    from pipeplan.spawn import check_local_ranks

    resolve_device(request.device)
    if request.nproc >= 2:  # the link measurement starts that many ranks here
        check_local_ranks(request.nproc, "cuda" if request.device.startswith("cuda") else "cpu")
    # Never over the model it reads: a config.json given as the model, or a file of a model
    # directory (its config.json or weights were replaced by the profile).
    model = Path(request.model)
    # As MODEL reads (`config_path`): `m/config.json/` names a folder m/config.json, not m.
    if model.name == "config.json" and model.is_file() and config_path(request.model) == model:
        # The profile names the folder, as `run --model` does (a config.json is the same
        # model): what report, calibrate and the demo compare a run's model with.
        model = model.parent
    # A built-in reads no file, even beside a folder of its name (`presets.config_path`).
    builtin = config_path(request.model) is None
    inputs = [] if builtin else [model, *(model.iterdir() if model.is_dir() else ())]
    check_writable(request.out, inputs=inputs, run_owned=run_owned)
    # Times and bytes do not depend on the weights' values, but a folder's weights are loaded
    # anyway: the checks `run` makes of them (NaN, a float stored as integers, a missing or
    # misshapen tensor) refuse a damaged checkpoint here, before it is timed, not at `run`
    # (the seventeenth round profiled all three). A config without weights is random.
    # `bert-tiny/config.json` names the folder ./bert-tiny, not the built-in bert-tiny.
    name = model_argument(model) if model != Path(request.model) else request.model
    if "padding_mask" in request.model_fields_set and not request.padding_mask:
        models.refuse_no_padding_mask(name, request.task)  # asked for, not the default
    seq = models.build(
        name,
        seq_len=request.seq_len,
        seed=request.seed,
        init=None if models.weight_file(name) else "random",
        task=request.task,
        num_labels=request.num_labels,
        padding_mask=request.padding_mask,
    )
    profile = profile_layers(
        seq,
        device=request.device,
        micro_batches=request.micro_batch_sizes,
        warmup=request.warmup,
        repeats=request.repeats,
        threads=request.threads,
        seed=request.seed,
        precision=request.precision,
        progress=progress,
    )
    if request.nproc >= 2:
        profile.comm = links.measure_links(request.nproc, device=request.device)
    try:
        text = dumps(profile)
    except TooLargeToRead as exc:  # a file no command would read (fiftieth round)
        labels = len(getattr(seq.config, "id2label", None) or {})
        raise BadArgumentError(
            f"{request.out}: {exc} (its model config names {labels:,} labels: train with fewer)"
        ) from None
    write_atomic(request.out, text, user_output=not run_owned)
    return profile
