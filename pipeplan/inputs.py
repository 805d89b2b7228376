"""What `pipeplan profile` and `pipeplan plan`/`preview` are asked to do, as typed models whose
fields are the commands' options (`pipeplan.options` derives the flags from them).

    request = PlanRequest(profile="profiles/bert-tiny@cpu-1t.json", devices_per_node=8)
    args = request.resolve()    # the Profile, Cluster, freeze schedule and pins it names
    make_plan(args.profile, args.cluster, **args.kwargs())

    profile_to_file(ProfileRequest(model="bert-tiny", out="p.json", micro_batch_sizes="1,2"))

These are requests, not file formats: nothing writes them. What a plan was made from is recorded
resolved, in `Plan.inputs`; a run's options are `RunConfig`, a format, since run.json is it.
Checks that need the profile (a freeze list against the model's depth, the cluster) happen in
`resolve`, with messages that name the flag as field validation does. Only light imports here:
cli.py builds its options from these models at start-up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from pipeplan.cluster import (
    cluster_from_flags,
    default_links,
    default_links_warning,
    format_bandwidth,
)
from pipeplan.errors import BadArgumentError, quoted
from pipeplan.formats import (
    Cluster,
    Flag,
    FreezeSchedule,
    NonNegInt,
    PosFloat,
    PosInt,
    Precision,
    Profile,
    Schedule,
    Strict,
    Task,
    flag_of,
    load,
)
from pipeplan.formats.base import Bytes, Count, Needs, Seed, int_list, leading_zero
from pipeplan.formats.cluster import (
    DEFAULT_CACHE_BUDGET_BYTES,
    DEFAULT_INTER_BANDWIDTH_BYTES_PER_S,
    DEFAULT_INTRA_BANDWIDTH_BYTES_PER_S,
)
from pipeplan.formats.modelconfig import MAX_CONFIG_LABELS
from pipeplan.formats.profile import MAX_ROUNDS as PROFILE_MAX_ROUNDS
from pipeplan.formats.profile import MAX_THREADS as PROFILE_MAX_THREADS
from pipeplan.formats.profile import FedInput, model_labels, profile_command
from pipeplan.formats.run import (
    ALPHA_NEEDS,
    BUDGET_DOES,
    CACHE_BUDGET_NEEDS,
    CACHE_DOES,
    CACHE_SOMETHING_FROZEN,
    SOMETHING_FROZEN,
    something_frozen,
)
from pipeplan.freeze import (
    alpha_schedule,
    autofreeze_earliest,
    no_freezing,
    schedule_from_flags,
)

if TYPE_CHECKING:
    from pipeplan.formats import Plan
    from pipeplan.solver import Pins

DEFAULT_ALPHA = 0.3
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4, 8)


def parse_micro_batches(text: str) -> list[int]:
    """'8,1,2,4' → [1, 2, 4, 8]; anything but distinct positive integers is a
    BadArgumentError."""
    sizes = int_list(text)
    if leading_zero(text):
        raise BadArgumentError(leading_zero(text))
    if sizes is None or min(sizes) < 1:
        raise BadArgumentError(
            f"micro-batch sizes must be positive integers separated by commas, got {quoted(text)}"
        )
    return distinct_sizes(sizes)


def distinct_sizes(sizes: list[int]) -> list[int]:
    """`distinct_sizes([8, 1, 2])` → [1, 2, 8]. A size given twice is refused, not merged:
    each size is timed once, so `1,1` was a typo for another size, and silently dropping it
    times fewer sizes than the user asked for."""
    seen: set[int] = set()
    for size in sizes:
        if size in seen:
            raise BadArgumentError(
                f"micro-batch size {size} is given twice; each size is timed once"
            )
        seen.add(size)
    return sorted(sizes)


# Limits of a profile's work: sizes timed, rounds per size, threads per rank.
MAX_SIZES = 64
MAX_ROUNDS = PROFILE_MAX_ROUNDS  # the profile format holds a profile's settings to it too
MAX_THREADS = PROFILE_MAX_THREADS  # the profile format holds a profile's device.threads to it


class ProfileRequest(Strict):
    """`pipeplan profile MODEL --out FILE …`: what to measure, how often, where to write it."""

    model: Annotated[str, Flag(argument=True)] = Field(
        description="Built-in model name, or a transformers directory (or its config.json)."
    )
    out: Annotated[str, Flag(short="-o")] = Field(description="Profile JSON to write.")
    # Bounded: the profile's time grows with every size, round and thread asked for.
    micro_batch_sizes: Annotated[list[Count], Field(min_length=1, max_length=MAX_SIZES)] = Field(
        list(DEFAULT_MICRO_BATCH_SIZES), description="Micro-batch sizes to time, comma-separated."
    )
    device: str = Field("cpu", description="cpu (gloo) or cuda (NCCL).")
    precision: Precision = Field(
        "fp32",
        description="fp32, or bf16 (bfloat16 autocast, float32 weights): time and count "
        "bytes as a run of that precision computes.",
    )
    nproc: Count = Field(1, description="With N ≥ 2 also measure links between N ranks.")
    threads: PosInt = Field(
        1, le=MAX_THREADS, description="Intra-op threads (the executor uses 1 per rank)."
    )
    warmup: NonNegInt = Field(2, le=MAX_ROUNDS, description="Warm-up rounds, not recorded.")
    repeats: PosInt = Field(5, le=MAX_ROUNDS, description="Recorded rounds; medians are reported.")
    seq_len: Annotated[Count | None, Flag(default="the model's own")] = Field(
        None, description="Sequence length of text models."
    )
    task: Annotated[Task | None, Flag(default="the model's own")] = Field(
        None, description="classification, or causal-lm for decoders: the run's task."
    )
    num_labels: Annotated[Count | None, Flag(default="the model's own")] = Field(
        None,
        ge=2,
        le=MAX_CONFIG_LABELS,
        description="Classes of a classifier's head: the run's (its data's labels).",
    )
    padding_mask: bool = Field(
        False, description="Time padded text, as runs on text files feed it (§4.17)."
    )
    seed: Seed = Field(0, description="Seed for weights and inputs.")

    @field_validator("threads")
    @classmethod
    def _threads_fit(cls, value: int) -> int:
        """No more threads than this host's cores: the one check of `--threads`."""
        from pipeplan.spawn import check_threads

        check_threads(value)
        return value

    @field_validator("micro_batch_sizes", mode="before")
    @classmethod
    def _sizes(cls, value: Any) -> Any:
        """The flag's form, '1,2,4,8'."""
        if not isinstance(value, str):
            return value
        try:
            return parse_micro_batches(value)
        except BadArgumentError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("micro_batch_sizes")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        """The Python API's list, held to what the flag's form is (`distinct_sizes`)."""
        try:
            return distinct_sizes(value)
        except BadArgumentError as exc:
            raise ValueError(str(exc)) from None


def check_precision(profile: Profile, precision: str, where: str) -> None:
    """A profile's times and bytes hold for the precision it was measured in: planning a run
    of another precision with it would price the wrong transfers, cache and compute.

        check_precision(load(Profile, "p.json"), "bf16", "p.json")   # BadArgumentError or None
    """
    measured = profile.model
    if measured.precision == precision:
        return
    # The profile's own input and head, so that the command profiles what it did (without
    # --seq-len a text model was profiled at its longest sequence: the thirty-fifth round).
    flags = f" --seq-len {measured.input_shape[0]}" if measured.input_dtype == "int64" else ""
    flags += f" --task {measured.task}"
    if measured.task == "classification":
        flags += f" --num-labels {measured.num_labels}"
    flags += " --padding-mask" if measured.padding_mask else ""
    command = profile_command(measured.name, f"{flags} --precision {precision}")
    raise BadArgumentError(
        f"{where} was measured in {measured.precision}, but --precision is {precision}; "
        f"pass --precision {measured.precision}, or profile in {precision}: {command}"
    )


# The flags that describe a cluster, refused beside --cluster.
NO_CLUSTER_FILE = Needs("cluster", (None,), "the cluster file describes the cluster")
NO_SCHEDULE = Needs(
    "freeze_schedule", (None,), "--freeze-schedule gives the frozen layers of every epoch"
)
CLUSTER_FIELDS = (
    "nodes",
    "devices_per_node",
    "device_memory_bytes",
    "intra_bandwidth_bytes_per_s",
    "inter_bandwidth_bytes_per_s",
    "cache_budget_bytes",
)


class PlanRequest(Strict):
    """`pipeplan plan` / `preview`: the profile, the cluster, the training shape, the freeze
    schedule, and the choices the user pins."""

    profile: str = Field(description="Profile JSON (see `pipeplan profile`; profiles/ ships some).")
    precision: Annotated[Precision | None, Flag(default="the profile's")] = Field(
        None,
        description="fp32 or bf16: the precision the run will train in; the profile must "
        "have been measured in it.",
    )
    cluster: str | None = Field(
        None, description="Cluster JSON; or describe it with the flags below."
    )
    # Not constrained here: cluster_from_flags checks them, in words that name the flag.
    nodes: Annotated[int, Flag(needs=NO_CLUSTER_FILE)] = Field(1, description="Nodes.")
    devices_per_node: Annotated[int, Flag(needs=NO_CLUSTER_FILE)] = Field(
        1, description="Devices per node."
    )
    device_memory_bytes: Annotated[
        PosInt | None,
        Flag(
            "--device-memory",
            unit="bytes",
            default="the profiled GPU's memory; on CPU the profiled host's memory / "
            "devices-per-node",
            needs=NO_CLUSTER_FILE,
        ),
    ] = Field(None, description="Memory per device, in bytes.")
    intra_bandwidth_bytes_per_s: Annotated[
        PosFloat | None,
        Flag(
            "--intra-bw",
            unit="bandwidth",
            default="the profile's measured link, else "
            + format_bandwidth(DEFAULT_INTRA_BANDWIDTH_BYTES_PER_S),
            needs=NO_CLUSTER_FILE,
        ),
    ] = Field(None, description="Intra-node bandwidth (bytes/s in the plan).")
    inter_bandwidth_bytes_per_s: Annotated[
        PosFloat, Flag("--inter-bw", unit="bandwidth", needs=NO_CLUSTER_FILE)
    ] = Field(
        DEFAULT_INTER_BANDWIDTH_BYTES_PER_S,
        description="Inter-node bandwidth (bytes/s in the plan).",
    )
    global_batch: PosInt = Field(256, description="Global batch, fixed across phases.")
    samples: PosInt = Field(
        50_000, description="Training-set size: steps per epoch = samples // global batch."
    )
    epochs: PosInt = Field(10, description="Epochs.")
    # Not constrained here: the freeze schedule checks it (`check_alpha`).
    alpha: Annotated[
        float | None,
        Flag(
            default=f"{DEFAULT_ALPHA} without --freeze-schedule", needs=(ALPHA_NEEDS, NO_SCHEDULE)
        ),
    ] = Field(None, description="Freeze bound α, 1e-06 ≤ α < 1.")
    freeze: Annotated[
        Literal["auto", "alpha", "none"] | None,
        Flag(default="auto, or the schedule given with --freeze-schedule", needs=NO_SCHEDULE),
    ] = Field(
        None,
        description="As `run --freeze`: auto is previewed as a band (the α bound, and the "
        "earliest AutoFreeze's gradient criterion can freeze deciding at epoch ends; run's "
        "--freeze-every may freeze sooner; a plan takes the α bound), alpha "
        "or none one schedule. Lists: --freeze-schedule.",
    )
    freeze_schedule: str | None = Field(
        None,
        description="Frozen layers per epoch: 0,0,3, or a JSON trajectory file, [0,0,3] or "
        '{"frozen_layers": [0,0,3]} (integers are always the list: ./4 names a file 4).',
    )
    cache: Annotated[
        bool,
        Flag(
            needs=(
                CACHE_SOMETHING_FROZEN,
                something_frozen("freeze_schedule", CACHE_DOES, when=(True,)),
            )
        ),
    ] = Field(True, description="Cache the frozen prefix's activations.")
    cache_budget_bytes: Annotated[
        Bytes,
        Flag(
            "--cache-budget",
            unit="bytes",
            needs=(
                CACHE_BUDGET_NEEDS,
                SOMETHING_FROZEN,
                something_frozen("freeze_schedule", BUDGET_DOES),
                NO_CLUSTER_FILE,
            ),
        ),
    ] = Field(
        DEFAULT_CACHE_BUDGET_BYTES,
        description="Host memory for the cache per node, in bytes; beyond it, local disk.",
    )
    stages: Annotated[PosInt | None, Flag(default="searched")] = Field(
        None, description="Pin the stage count S."
    )
    micro_batches: Annotated[PosInt | None, Flag(default="searched")] = Field(
        None, description="Pin the micro-batch count M."
    )
    schedule: Annotated[Schedule | None, Flag(default="searched")] = Field(
        None, description="Pin the schedule: gpipe or 1f1b."
    )
    boundaries: Annotated[tuple[int, ...] | None, Flag(default="searched")] = Field(
        None, description="Pin the stage boundaries, e.g. 0,3,6."
    )

    @field_validator("boundaries", mode="before")
    @classmethod
    def _boundaries(cls, value: Any) -> Any:
        """The flag's form, '0,3,6'."""
        if not isinstance(value, str):
            return value
        indices = int_list(value)
        if leading_zero(value):
            raise ValueError(leading_zero(value))
        if indices is None:
            raise ValueError(
                f"must be comma-separated layer indices like 0,5,14, not {quoted(value)}"
            )
        return tuple(indices)

    def resolve(self) -> PlanArgs:
        """Load the profile and cluster, build the freeze schedule and the pins."""
        from pipeplan.costmodel import check_profile
        from pipeplan.solver import Pins  # the solver pulls in scipy: not at start-up

        profile = load(Profile, self.profile)
        check_profile(profile, self.profile)
        if self.precision is not None:  # left out, it is the profile's own
            check_precision(profile, self.precision, self.profile)
        cluster = self._cluster(profile)
        freeze, later = self._freeze(len(profile.layers) - 2)
        pins = Pins(
            num_stages=self.stages,
            micro_batches=self.micro_batches,
            schedule=self.schedule,
            boundaries=self.boundaries,
        )
        return PlanArgs(
            profile,
            cluster,
            self.global_batch,
            self.samples,
            self.epochs,
            freeze,
            self.cache,
            pins,
            later,
            self._links_given(),
            self.profile,
        )

    def _links_given(self) -> str | None:
        """What described the in-node links, in the words of a message: None where they are
        the profile's measured ones."""
        if self.cluster is not None:
            return f"the cluster file {quoted(self.cluster)}"  # its fields: `links_warning`
        if self.intra_bandwidth_bytes_per_s is not None:
            return f"--intra-bw {format_bandwidth(self.intra_bandwidth_bytes_per_s)}"
        return None

    def _freeze(self, num_blocks: int) -> tuple[FreezeSchedule, FreezeSchedule | None]:
        """The schedule to plan, and for auto the later-freezing case of the preview's band."""
        if self.freeze_schedule is not None:
            if self.freeze is not None:
                raise BadArgumentError("give --freeze or --freeze-schedule, not both")
            return schedule_from_flags(
                self.alpha, self.freeze_schedule, self.epochs, num_blocks
            ), None
        if self.freeze == "none":
            if self.alpha is not None:
                raise BadArgumentError("--alpha has no effect with --freeze none")
            return no_freezing(self.epochs), None
        alpha = DEFAULT_ALPHA if self.alpha is None else self.alpha
        best = alpha_schedule(alpha, self.epochs, num_blocks)
        if self.freeze == "alpha":
            return best, None
        return best, autofreeze_earliest(alpha, self.epochs, num_blocks)

    def _cluster(self, profile: Profile) -> Cluster:
        # A memory no flag gave is named with its file in "does not fit" refusals (forty-
        # eighth round: a cluster file's device_memory_bytes of 1 was refused unnamed).
        if self.cluster is None:
            cluster = cluster_from_flags(
                nodes=self.nodes,
                devices_per_node=self.devices_per_node,
                device_memory=self.device_memory_bytes,
                intra_bw=self.intra_bandwidth_bytes_per_s,
                inter_bw=self.inter_bandwidth_bytes_per_s,
                cache_budget=self.cache_budget_bytes,
                profile=profile,
            )
            if cluster._memory_source:
                cluster._memory_source += f", {self.profile}"
            return cluster
        given = [f for f in CLUSTER_FIELDS if f in self.model_fields_set]
        if given:
            raise BadArgumentError(f"give --cluster or {flag_of(PlanRequest, given[0])}, not both")
        cluster = load(Cluster, self.cluster)
        cluster._memory_source = f"{self.cluster}'s device_memory_bytes"
        return cluster


def shown(link: Any) -> str:
    """'250 µs + 1 GB/s': a link's latency and bandwidth, for messages."""
    return f"{link.latency_s * 1e6:.0f} µs + {link.bandwidth_bytes_per_s / 1e9:.3g} GB/s"


@dataclass
class PlanArgs:
    """A resolved `PlanRequest`: `make_plan(args.profile, args.cluster, **args.kwargs())`,
    `make_preview(args.profile, args.cluster, **args.preview_kwargs())`."""

    profile: Profile
    cluster: Cluster
    global_batch: int
    samples: int
    epochs: int
    freeze: FreezeSchedule
    cache: bool
    pins: Pins
    later: FreezeSchedule | None = None  # auto: the band's later case (preview only)
    links_given: str | None = None  # what gave the in-node links (`_links_given`)
    profile_file: str = "the profile"  # --profile, in messages

    def warn(self, plan: Plan) -> None:
        """`pipeplan: WARNING:` `links_warning()`, `default_links_warning(plan)` and
        `shapes_warning(plan)`, where there are any: once the command's work is done (a
        warning before an error line is not one line).

            args.warn(make_plan(args.profile, args.cluster, **args.kwargs()))
        """
        said = (self.links_warning(), self.default_links_warning(plan), self.shapes_warning(plan))
        for warning in said:
            if warning:
                logging.getLogger("pipeplan.plan").warning(warning)

    def default_links_warning(self, plan: Plan) -> str | None:
        """Where the plan's layouts of several ranks in a node are priced on the format's
        default in-node links (`cluster.default_links`: the profile measured none, and no
        --intra-bw or cluster file gave them), one line saying so; else None."""
        if self.links_given is not None or self.cluster.devices_per_node == 1:
            return None
        shapes = [(p.layout.num_stages, p.layout.replicas) for p in plan.phases]
        links = default_links(self.profile, shapes)
        if not links:
            return None
        # The command that measured the profile's input, with the links of a node's ranks.
        name = self.profile.model.name
        flags = FedInput.of_profile(self.profile).flags(model_labels(name))
        # A synthetic profile (`pipeplan.synthetic`: a config without model_type) names no
        # model `pipeplan profile` can build: the model it stands for, MODEL.
        model = name if "model_type" in self.profile.model.config else "MODEL"
        command = profile_command(model, flags, self.cluster.devices_per_node)
        measure = f"measure them with `{command}` on the devices, or give --intra-bw"
        return default_links_warning(self.profile_file, links, measure)

    def shapes_warning(self, plan: Plan) -> str | None:
        """Where the plan's phases have a (stages, replicas) shape that none of the phases a
        calibrated profile was fitted on had (`Calibration.shapes`), one line saying which,
        and on which shapes the fit was made; else None (no calibration, or one written
        before it recorded its shapes). Found by the sixty-second round: a fit of 1x2 runs
        (its all-reduce from one replica count, its per-call scales not separated) re-planned
        1x1, which then trained slower than the 1x2 plan it replaced, and nothing said that
        the fit had never measured such a layout."""
        calibration = self.profile.calibration
        if calibration is None or calibration.shapes is None:
            return None
        fitted = [shape.label() for shape in calibration.shapes]
        unseen: dict[str, list[int]] = {}
        for index, phase in enumerate(plan.phases):
            shape = f"{phase.layout.num_stages}x{phase.layout.replicas}"
            if shape not in fitted:
                unseen.setdefault(shape, []).append(index)
        if not unseen:
            return None

        def phases(indices: list[int]) -> str:
            return f"phase{'s' * (len(indices) > 1)} {', '.join(map(str, indices))}"

        chosen = "; ".join(f"{shape} in {phases(i)}" for shape, i in unseen.items())
        return (
            f"the calibration was fitted on layouts of (stages x replicas) "
            f"{', '.join(fitted)} only, and the plan chooses {chosen}: priced by a fit that "
            "never measured that shape (its all-reduce, pipeline and step overhead there); "
            "a run of it, calibrated together with the others, measures it"
        )

    def links_warning(self) -> str | None:
        """Where a calibrated profile's fitted in-node links were not priced because the user
        described other links (`costmodel.in_node_links`), what was priced instead, in one
        line for `pipeplan: WARNING:`; else None. The commands log it once their work is done
        (a warning before an error line is not one line)."""
        from pipeplan.costmodel import in_node_links  # numpy: only once planned

        calibration = self.profile.calibration
        # One device per node has no in-node link: every transfer crosses nodes. Found by the
        # thirty-sixth round: `--nodes 4 --devices-per-node 1 --intra-bw 1GB/s` warned of an
        # in-node pricing that no transfer of the plan had.
        if calibration is None or self.cluster.devices_per_node == 1:
            return None
        priced = in_node_links(self.profile, self.cluster)
        names = ("p2p", "all-reduce")
        fitted = (calibration.p2p, calibration.allreduce)
        replaced = [
            (name, fit, link)
            for name, fit, link in zip(names, fitted, priced, strict=True)
            if fit is not None
            and (fit.latency_s, fit.bandwidth_bytes_per_s)
            != (link.latency_s, link.bandwidth_bytes_per_s)
        ]
        if not replaced:
            return None
        given = self.links_given or "the cluster"
        if given.startswith("the cluster file "):
            # The fields that priced what was replaced. Found by the thirty-sixth round: a file
            # whose intra_node_allreduce alone differed was said to differ in its intra_node.
            own_ring = self.cluster.intra_node_allreduce is not None
            fields = {
                "intra_node_allreduce" if name == "all-reduce" and own_ring else "intra_node"
                for name, _, _ in replaced
            }
            given += f" ({' and '.join(sorted(fields))})"
        return (
            f"{given} describes other in-node links than the "
            "profiled machine's the calibration fitted: priced "
            + ", ".join(f"{name} {shown(link)} (not {shown(fit)})" for name, fit, link in replaced)
            + ", the links given plus what the calibrated runs spent beyond the measured ones"
        )

    def kwargs(self) -> dict[str, Any]:
        return dict(
            global_batch=self.global_batch,
            samples=self.samples,
            epochs=self.epochs,
            freeze=self.freeze,
            cache=self.cache,
            pins=self.pins,
        )

    def preview_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs(), later=self.later)
