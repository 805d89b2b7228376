"""The plan format (`pipeplan plan --out`, `pipeplan run --plan`) and the preview it is part of
(`pipeplan preview --json`). A phase plan composes the phase's `Layout` with the planner's
predictions for it (docs/architecture.md §3, §4)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WrapValidator, model_validator

from pipeplan.errors import BadArgumentError, quoted
from pipeplan.formats.base import (
    MAX_COUNT,
    MAX_EPOCHS,
    MAX_SAMPLES,
    NonNegFloat,
    NonNegInt,
    PosInt,
    PredictedSeconds,
    Steps,
    Strict,
    Text,
    Versioned,
    printable,
    short,
)
from pipeplan.formats.cluster import Cluster
from pipeplan.formats.freeze import FreezeSchedule, not_made_by_source
from pipeplan.formats.layout import EpochShape, Layout
from pipeplan.formats.profile import ProfileIdentity

# The planner rounds every time it writes to 9 significant digits (`pipeplan.plan._r`): each is
# off its exact value by at most 5e-9 of itself, so a sum of rounded terms is off the rounded
# sum by at most 5e-9 of the terms' magnitudes added up. Twice that is the tolerance.
TIME_REL_TOL = 1e-8


def close_enough(what: str, value: float, expected: float, scale: float, relation: str) -> None:
    """`value` must be `expected` within the rounding of terms whose magnitudes add up to
    `scale` (ValueError, `what value relation expected`, otherwise).

        close_enough("predicted_total_s", 5.6, 5.6000000001, 11.2, "is not the phases' sum,")
    """
    # A sum of finite fields can still overflow (1e308 + 1e308): no plan the planner writes
    # gets near, and inf − inf would compare as nothing, so it is refused outright.
    if not math.isfinite(scale):
        raise ValueError(f"{what} {value!r} is too large to be a prediction")
    if not abs(value - expected) <= TIME_REL_TOL * scale:
        raise ValueError(f"{what} {value!r} {relation} {expected!r}")


class StagePlan(Strict):
    """The planner's prediction for one stage of a layout."""

    first_layer: NonNegInt
    stop_layer: PosInt = Field(description="Exclusive.")
    fwd_s: PredictedSeconds = Field(description="Forward per micro-batch.")
    bwd_s: PredictedSeconds = Field(description="Backward per micro-batch.")
    send_fwd_s: PredictedSeconds
    send_bwd_s: PredictedSeconds
    allreduce_s: PredictedSeconds
    optimizer_s: PredictedSeconds
    memory_bytes: NonNegInt


def check_stages(layout: Layout, stages: list[StagePlan] | None) -> None:
    """Predicted stages must be the layout's stages, in order (ValueError otherwise)."""
    if stages is None:
        return
    if len(stages) != layout.num_stages:
        raise ValueError(f"{len(stages)} predicted stages for a {layout.num_stages}-stage layout")
    b = layout.boundaries
    for s, stage in enumerate(stages):
        if (stage.first_layer, stage.stop_layer) != (b[s], b[s + 1]):
            # Both sides, so an edit of either says which layers disagree.
            raise ValueError(
                f"predicted stage {s} holds layers {stage.first_layer}..{stage.stop_layer}, but "
                f"the layout's boundaries {quoted(list(b))} give it {b[s]}..{b[s + 1]}"
            )


def check_stage_work(i: int, phase: PhasePlan) -> None:
    """`check_step_holds_stages` for phase `i` of a plan.

    check_stage_work(0, plan.phases[0])
    """
    m = phase.layout.micro_batches
    check_step_holds_stages(phase.stages, m, phase.step_s, f"phase {i} stage {{}}", "step_s")


def check_step_holds_stages(
    stages: list[StagePlan], micro_batches: int, step_s: float, stage: str, step: str
) -> None:
    """Each stage's work in a step is part of the step (`simulate._finish`): one device runs
    its M forwards and backwards one after another, then (if it trains) its all-reduce, at
    least as long as alone, and its optimizer; each link carries M sends one after another.
    So none exceeds the step (ValueError naming the stage, `stage` formatted with its index,
    and the step's field `step`, otherwise). A plan's phases and a run's phase records
    (fourteenth and nineteenth rounds) are held to it alike.

        check_step_holds_stages(phase.stages, 4, phase.step_s, "phase 0 stage {}", "step_s")
    """
    m = micro_batches
    for s, st in enumerate(stages):
        parts = {
            "M × (fwd_s + bwd_s) + allreduce_s + optimizer_s": (
                m * st.fwd_s,
                m * st.bwd_s,
                st.allreduce_s,
                st.optimizer_s,
            ),
            "M × send_fwd_s": (m * st.send_fwd_s,),
            "M × send_bwd_s": (m * st.send_bwd_s,),
        }
        for name, terms in parts.items():
            work = sum(terms)
            if work > step_s:
                close_enough(
                    f"{stage.format(s)}: {name} (M = {m})",
                    work,
                    step_s,
                    work + step_s,
                    f"exceeds the step it is part of, {step}",
                )


def step_upper_bound_s(stages: list[StagePlan], micro_batches: int, overhead_s: float) -> float:
    """The longest a simulated step of these stages can take: every op, transfer, all-reduce
    and optimizer one after another, plus the step's calibrated overhead outside the schedule
    (`CostModel.step_overhead_s`). The schedule's step is its longest chain of ops each
    waiting for the one before; each op, each stage's all-reduce (as long as the shared
    links made it, which the stages record) and optimizer is on that chain at most once.

        step_upper_bound_s(phase.stages, 4, 0.0) >= phase.step_s   # uncalibrated
    """
    m = micro_batches
    work = sum(
        m * (st.fwd_s + st.bwd_s + st.send_fwd_s + st.send_bwd_s) + st.allreduce_s + st.optimizer_s
        for st in stages
    )
    return work + overhead_s


class ScoredLayout(Strict):
    """A layout the solver simulated, with its step time."""

    layout: Layout
    step_s: PredictedSeconds


def placed(layout: Layout, per_node: int) -> tuple[Layout, tuple[tuple[int, ...], ...]]:
    """`layout` as it is priced: its fields but the rank map, and the node of each of its
    cells, replicas in any order (ranks in a node are interchangeable)."""
    nodes = sorted(tuple(rank // per_node for rank in row) for row in layout.rank_map)
    return layout.model_copy(update={"rank_map": ()}), tuple(nodes)


# Twice the runner-ups the planner writes (`solve_phase`'s 2).
MAX_RUNNER_UPS = 4


# Counts are bounded by the planner's own limits (`TrainingShape.check`): an epoch count of
# 10**400 would not even convert to a float to be multiplied by an epoch's time.
class PhasePlan(Strict):
    start_epoch: NonNegInt = Field(le=MAX_EPOCHS)
    epochs: PosInt = Field(le=MAX_EPOCHS)
    layout: Layout
    step_s: PredictedSeconds = Field(description="Predicted step (cached steady state if cached).")
    epoch_s: NonNegFloat = Field(description="Predicted epoch (cached steady state if cached).")
    first_epoch_s: NonNegFloat = Field(description="First epoch (fills the cache if cached).")
    transition_s: NonNegFloat = Field(description="Re-partitioning before the phase starts.")
    total_s: NonNegFloat = Field(description="transition + all epochs of the phase.")
    stages: list[StagePlan]
    # The planner keeps 2. Each is read before the count is checked (microseconds), but not
    # checked against its phase: a plan of 120,000 took 47 s and 1.2 GB (fifty-third round).
    runner_ups: list[ScoredLayout] = Field(max_length=MAX_RUNNER_UPS)

    @model_validator(mode="after")
    def _stages_match_layout(self) -> PhasePlan:
        check_stages(self.layout, self.stages)
        return self

    @model_validator(mode="after")
    def _total_is_its_epochs(self) -> PhasePlan:
        """total_s = transition_s + first_epoch_s + the later epochs (`_Choice.total_s`). A later
        epoch is epoch_s uncached; cached it lies between first_epoch_s (every row a miss) and
        epoch_s (every row a hit), its hits growing epoch by epoch: a bound either way, which
        holds whatever the layout says about the cache, and is exact for one epoch."""
        n = self.epochs - 1
        low = self.transition_s + self.first_epoch_s + n * min(self.first_epoch_s, self.epoch_s)
        high = self.transition_s + self.first_epoch_s + n * max(self.first_epoch_s, self.epoch_s)
        scale = self.total_s + high
        if not math.isfinite(scale):  # else an infinite `high` would bound nothing
            raise ValueError(f"total_s {self.total_s!r}: its epochs are too long to add up")
        words = f"transition_s + first_epoch_s + {n} later epochs at"
        if self.total_s < low:
            close_enough("total_s", self.total_s, low, scale, f"is below {words} least")
        if self.total_s > high:
            close_enough("total_s", self.total_s, high, scale, f"is above {words} most")
        return self

    def epochs_said(self) -> str:
        """The phase's epochs, numbered from 0 as `start_epoch`, `preview`'s table and the
        run's files number them: `epoch 0`, `epochs 4–9` (start 4, 6 epochs)."""
        if self.epochs == 1:
            return f"epoch {self.start_epoch}"
        return f"epochs {self.start_epoch}–{self.start_epoch + self.epochs - 1}"


def _text_pin_first(value: Any, handler: Callable[[Any], Any]) -> Any:
    """A pin given as text held to a text's checks before the union's: its errors put the
    integer branch's first ("Input should be a valid integer (and 2 more)"), where a string of
    10^6 characters is refused for its length (the seventieth round)."""
    if type(value) is str:
        return printable(short(value))
    return handler(value)


PinValue = Annotated[int | Text | list[int], WrapValidator(_text_pin_first)]


class PlanInputs(Strict):
    profile: ProfileIdentity
    cluster: Cluster
    global_batch: PosInt = Field(le=MAX_COUNT)
    samples: PosInt = Field(le=MAX_SAMPLES)
    epochs: PosInt = Field(le=MAX_EPOCHS)
    steps_per_epoch: Steps
    freeze: FreezeSchedule
    cache: bool
    pinned: dict[Text, PinValue]


# Each pin as a layout has it (`Plan._phases_keep_pins`).
PINNED: dict[str, Callable[[Layout], int | str | list[int]]] = {
    "num_stages": lambda layout: layout.num_stages,
    "replicas": lambda layout: layout.replicas,
    "micro_batches": lambda layout: layout.micro_batches,
    "schedule": lambda layout: layout.schedule,
    "boundaries": lambda layout: list(layout.boundaries),
}


def _check_rank_map_size(what: str, layout: Any, devices: int) -> None:
    """A decoded layout's rank map holds each of the cluster's `devices` at most once: more
    cells than devices is refused before pydantic builds them (the sixtieth round: 2,000,000
    rows of [0] took 24 s and 1.5 GB to refuse; 100 MB would take some 15 GB)."""
    rows = layout.get("rank_map") if isinstance(layout, dict) else None
    if not isinstance(rows, list):
        return  # the fields' own checks say what it is
    cells = sum(len(row) if isinstance(row, list) else 1 for row in rows)
    if cells > devices:
        raise ValueError(
            f"{what}: its rank map places {cells:,} ranks, but inputs.cluster has {devices:,} "
            "devices: each rank once"
        )


def _devices(document: dict) -> int | None:
    """The devices of a decoded plan's inputs.cluster (nodes × devices_per_node), None where
    they are not plain positive integers (its own checks say why once built)."""
    inputs = document.get("inputs")
    cluster = inputs.get("cluster") if isinstance(inputs, dict) else None
    if not isinstance(cluster, dict):
        return None
    nodes, per_node = cluster.get("nodes"), cluster.get("devices_per_node")
    if type(nodes) is not int or type(per_node) is not int or nodes < 1 or per_node < 1:
        return None
    return nodes * per_node


def check_phase_count(phases: int, num_layers: int) -> None:
    """`check_phase_count(11, 10)` raises: a plan's phases over its layers (`Plan`)."""
    if phases > num_layers:
        raise ValueError(
            f"{phases:,} phases over {num_layers} layers; a phase freezes more layers than the "
            f"one before it, and never the head: at most {num_layers}"
        )


class Plan(Versioned):
    schema_version: Literal[2] = 2
    inputs: PlanInputs
    phases: list[PhasePlan]
    predicted_total_s: NonNegFloat

    @classmethod
    def check_counts(cls, document: dict) -> None:
        """The phases and each one's runner-ups counted in the decoded file, before pydantic
        builds them (`formats.base.parse` calls it), with the lines their checks give once
        built (`_layouts_run`, `PhasePlan.runner_ups`): built first, a plan of 50,000 phases
        took 75 s and 1.08 GB to refuse (the fifty-seventh round). A phase trains an epoch or
        more, a plan at most MAX_EPOCHS. Not a "before" validator: that hands pydantic Python
        lists, which strict validation refuses as tuples (a layout's boundaries).

            Plan.check_counts(json.loads(text))   # ValueError: "50,000 phases: …"
        """
        phases = document.get("phases")
        if not isinstance(phases, list):
            return  # the fields' own checks say what it is
        if len(phases) > MAX_EPOCHS:
            raise ValueError(
                f"{len(phases):,} phases: a phase trains at least one epoch, a plan at most "
                f"{MAX_EPOCHS:,}"
            )
        layout = phases[0].get("layout") if phases and isinstance(phases[0], dict) else None
        ends = layout.get("boundaries") if isinstance(layout, dict) else None
        layers = None
        if isinstance(ends, list) and ends and type(ends[-1]) is int and ends[-1] > 0:
            layers = ends[-1]
            check_phase_count(len(phases), layers)  # phase 0's layers, as once built
        devices = _devices(document)
        for i, phase in enumerate(phases):
            others = phase.get("runner_ups") if isinstance(phase, dict) else None
            if isinstance(others, list) and len(others) > MAX_RUNNER_UPS:
                raise ValueError(  # as pydantic says it of the built list (`PhasePlan`)
                    f"field 'phases.{i}.runner_ups': List should have at most {MAX_RUNNER_UPS} "
                    f"items, not {len(others)}"
                )
            # Each phase's stages, one a stage of its layout, as `check_stages` says it once
            # built (the fifty-eighth round: 300,000 of a 1-stage layout took 22 s, 1.6 GB).
            stages = phase.get("stages") if isinstance(phase, dict) else None
            layout = phase.get("layout") if isinstance(phase, dict) else None
            ends = layout.get("boundaries") if isinstance(layout, dict) else None
            # num_stages, where the boundaries can be a layout's (else its own check says why)
            plain = (
                isinstance(ends, list)
                and len(ends) >= 2
                and all(type(e) is int for e in ends)
                and all(a < b for a, b in itertools.pairwise(ends))
            )
            count = len(ends) - 1 if plain else None
            # The boundaries too, bounded by the layers and the devices (the fifty-ninth round:
            # 300,000 stages over 300,001 boundaries were built, 1.7 GB, before the refusal).
            if count is not None and layers is not None and count > layers:
                raise ValueError(
                    f"phase {i}: its boundaries end at layer {ends[-1]}, phase 0's at "
                    f"{layers}: every phase splits the same layers"
                )
            if count is not None and devices is not None and count > devices:
                raise ValueError(
                    f"phase {i}: a {count}-stage layout, but inputs.cluster has {devices} "
                    "devices: each stage takes one"
                )
            if isinstance(stages, list) and count is not None and len(stages) != count:
                raise ValueError(
                    f"field 'phases.{i}': {len(stages)} predicted stages for a {count}-stage layout"
                )
            if devices is not None:
                laid = [(f"phase {i}", layout)]
                if isinstance(others, list):
                    laid += [
                        (f"phase {i}'s runner_ups[{j}]", other.get("layout"))
                        for j, other in enumerate(others)
                        if isinstance(other, dict)
                    ]
                for what, each in laid:
                    _check_rank_map_size(what, each, devices)

    @model_validator(mode="after")
    def _phases_fit_inputs(self) -> Plan:
        devices = self.inputs.cluster.nodes * self.inputs.cluster.devices_per_node
        for i, phase in enumerate(self.phases):
            if phase.layout.global_batch != self.inputs.global_batch:
                raise ValueError(
                    f"phase {i}: its layout's global batch {phase.layout.global_batch} is not "
                    f"the plan's {self.inputs.global_batch}"
                )
            ranks = [r for row in phase.layout.rank_map for r in row]
            if any(r >= devices for r in ranks):
                raise ValueError(f"phase {i}: its rank map uses ranks beyond {devices} devices")
        # The phases tile the training: in order, each starting where the last one ended.
        start = 0
        for i, phase in enumerate(self.phases):
            if phase.start_epoch != start:
                raise ValueError(f"phase {i} starts at epoch {phase.start_epoch}, not {start}")
            start += phase.epochs
        if start != self.inputs.epochs:
            raise ValueError(f"the phases cover {start} epochs, the plan {self.inputs.epochs}")
        return self

    @model_validator(mode="after")
    def _layouts_run(self) -> Plan:
        """Every phase's layout passes the one check the executor applies before running it
        (`Layout.check`, as `executor.planning.check_plan` calls it) for the plan's own layer
        count: the layer its boundaries end at, which every phase shares (the plan records its
        profile by sha256 alone, so the count is the layouts'; `check_plan` holds it to the
        run's profile). inputs.freeze freezes 0..L−1 layers likewise: the head never freezes.
        A plan the executor would refuse is refused here, naming the field, not a flag."""
        if not self.phases:
            return self
        num_layers = self.phases[0].layout.boundaries[-1]
        devices = self.inputs.cluster.num_devices
        # Before each is checked (the fifty-sixth round: 10,000 phases of 16 runner-ups took
        # 38 s and 1.6 GB to refuse), and before they are built (`check_counts`).
        check_phase_count(len(self.phases), num_layers)
        for i, phase in enumerate(self.phases):
            ends = phase.layout.boundaries[-1]
            if ends != num_layers:
                raise ValueError(
                    f"phase {i}: its boundaries end at layer {ends}, phase 0's at {num_layers}: "
                    "every phase splits the same layers"
                )
            try:
                phase.layout.check(num_layers, devices)
            except BadArgumentError as exc:
                raise ValueError(f"phase {i}: its layout cannot run: {exc}") from None
            # The runner-ups are layouts of the same phase: held to the same check (the
            # fortieth round: one on rank 5 of a 2-device plan passed `run --plan`).
            for j, other in enumerate(phase.runner_ups):
                try:
                    other.layout.check(num_layers, devices)
                except BadArgumentError as exc:
                    raise ValueError(
                        f"phase {i}: runner_ups[{j}]: its layout cannot run: {exc}"
                    ) from None
                if other.layout.frozen_layers != phase.layout.frozen_layers:
                    raise ValueError(
                        f"phase {i}: runner_ups[{j}] freezes {other.layout.frozen_layers} "
                        f"layers, its phase {phase.layout.frozen_layers}"
                    )
                # Of the same step too (the fifty-eighth round: one of 12 samples, and one of
                # a micro-batch of 2^70, passed in a plan of 32).
                if other.layout.global_batch != self.inputs.global_batch:
                    raise ValueError(
                        f"phase {i}: runner_ups[{j}]: its layout's global batch "
                        f"{other.layout.global_batch} is not the plan's "
                        f"{self.inputs.global_batch}"
                    )
                # Others than the phase's and each other's (`solve_phase` skips a layout it
                # listed): the sixty-first round's copies of the chosen one passed.
                # Placed alike is priced alike (the sixty-second round: `[[0, 1, 3]]` beside
                # the chosen `[[0, 1, 2]]` on 2 x 2 passed): one node for each cell, replicas
                # in any order, is one layout to the planner (`costmodel.placement_family`).
                per_node = self.inputs.cluster.devices_per_node
                seen = [placed(phase.layout, per_node)]
                seen += [placed(o.layout, per_node) for o in phase.runner_ups[:j]]
                if (key := placed(other.layout, per_node)) in seen:
                    which = seen.index(key)
                    same = "the phase's own" if which == 0 else f"runner_ups[{which - 1}]'s"
                    raise ValueError(
                        f"phase {i}: runner_ups[{j}]: its layout ({other.layout.label()}) is "
                        f"{same}, its cells on the same nodes; the planner lists each other "
                        "layout once"
                    )
        for epoch, frozen in enumerate(self.inputs.freeze.frozen_layers):
            if frozen > num_layers - 1:
                raise ValueError(
                    f"inputs.freeze: epoch {epoch} freezes {frozen} layers of the plan's "
                    f"{num_layers} (the head, layer {num_layers - 1}, is never frozen)"
                )
        return self

    @model_validator(mode="after")
    def _phases_follow_schedule(self) -> Plan:
        """The phases are the plan's own freeze schedule (`pipeplan.freeze.phases`): one per
        run of epochs at one freeze point, each freezing what the schedule says for every one
        of its epochs, so freezing only grows from phase to phase. `pipeplan run --plan`
        follows that schedule epoch by epoch and takes each freeze point's layout from its
        phase: a phase that unfroze layers, or disagreed with the schedule, would leave the
        run a freeze point no phase plans. A cached phase needs a plan made with the cache."""
        schedule = self.inputs.freeze.frozen_layers
        if len(schedule) != self.inputs.epochs:
            raise ValueError(
                f"inputs.freeze has {len(schedule)} epochs of frozen layers, the plan "
                f"{self.inputs.epochs}"
            )
        for i, phase in enumerate(self.phases):
            frozen = phase.layout.frozen_layers
            if i > 0 and frozen <= self.phases[i - 1].layout.frozen_layers:
                before = self.phases[i - 1].layout.frozen_layers
                raise ValueError(
                    f"phase {i} freezes {frozen} layers after phase {i - 1} froze {before}: "
                    "freezing only grows, and a phase starts only where the freeze point moves"
                )
            for epoch in range(phase.start_epoch, phase.start_epoch + phase.epochs):
                if schedule[epoch] != frozen:
                    raise ValueError(
                        f"phase {i} freezes {frozen} layers, but inputs.freeze has "
                        f"{schedule[epoch]} at epoch {epoch}"
                    )
            if phase.layout.cached and not self.inputs.cache:
                raise ValueError(f"phase {i} reads the cache of a plan made without one")
            # Its runner-ups were searched as it was (the sixty-second round: a cached one
            # passed in a --no-cache plan).
            for j, other in enumerate(phase.runner_ups):
                if other.layout.cached and not self.inputs.cache:
                    raise ValueError(
                        f"phase {i}: runner_ups[{j}] reads the cache of a plan made without one"
                    )
        return self

    @model_validator(mode="after")
    def _schedule_is_its_source(self) -> Plan:
        """A schedule whose source is a rule (none, the α bound, AutoFreeze's earliest) is
        what the rule gives for the plan's epochs and blocks (`not_made_by_source`): a source
        or alpha edited beside frozen_layers it did not give says one schedule while the
        phases run another (the eighteenth round: source none beside [0, 5, 7]). The
        blocks are the layers between embeddings and head."""
        freeze = self.inputs.freeze
        if not self.phases or len(freeze.frozen_layers) != self.inputs.epochs:
            return self  # the length is checked with the phases, naming both
        num_blocks = self.phases[0].layout.boundaries[-1] - 2
        why = not_made_by_source(freeze.source, freeze.alpha, freeze.frozen_layers, num_blocks)
        if why:
            raise ValueError(f"inputs.freeze: {why}")
        return self

    @model_validator(mode="after")
    def _phases_keep_pins(self) -> Plan:
        """What the user pinned (`--stages`, `--replicas`, `--micro-batches`, `--schedule`,
        `--boundaries`: `pipeplan.plan._pins_dict`) every phase's layout has, and each of its
        runner-ups: the solver searches only layouts that do (the sixty-second round: a 1x2
        runner-up passed in a --stages 2 plan, faster than its pinned phase)."""
        for key, value in self.inputs.pinned.items():
            if key not in PINNED:
                raise ValueError(f"inputs.pinned: {key!r} is not a pin ({', '.join(PINNED)})")
            for i, phase in enumerate(self.phases):
                held = PINNED[key](phase.layout)
                if held != value:
                    raise ValueError(
                        f"phase {i}: its layout's {key} {quoted(held)} is not the pinned "
                        f"{quoted(value)}"
                    )
                for j, other in enumerate(phase.runner_ups):
                    held = PINNED[key](other.layout)
                    if held != value:
                        raise ValueError(
                            f"phase {i}: runner_ups[{j}]: its layout's {key} {quoted(held)} is "
                            f"not the pinned {quoted(value)}"
                        )
        return self

    @model_validator(mode="after")
    def _predictions_agree(self) -> Plan:
        """The predictions are the planner's for this cluster: every stage fits its device
        (the solver keeps only layouts that do, `Evaluation.fits`), an epoch is its whole
        batches, each at least a step (a cached epoch adds the reads that spill to disk), and
        the total is what the phases add up to (`make_plan`)."""
        memory = self.inputs.cluster.device_memory_bytes
        steps = self.inputs.steps_per_epoch
        # The last partial batch is dropped (`TrainingShape.steps_per_epoch`).
        if steps != self.inputs.samples // self.inputs.global_batch:
            raise ValueError(
                f"inputs.steps_per_epoch {steps} is not inputs.samples // inputs.global_batch "
                f"({self.inputs.samples // self.inputs.global_batch})"
            )
        for i, phase in enumerate(self.phases):
            for s, stage in enumerate(phase.stages):
                if stage.memory_bytes > memory:
                    raise ValueError(
                        f"phase {i} stage {s}: memory_bytes {stage.memory_bytes} exceeds "
                        f"inputs.cluster.device_memory_bytes {memory}"
                    )
            check_stage_work(i, phase)
            floor = steps * phase.step_s
            if not phase.layout.cached:
                # Uncached, every epoch is its steps at step_s (`_phase_choice`): exact, and
                # so is the total (`_total_is_its_epochs` with first = later epochs).
                what, relation = f"phase {i}: epoch_s", f"is not {steps} steps × step_s ="
                close_enough(what, phase.epoch_s, floor, phase.epoch_s + floor, relation)
                what, relation = f"phase {i}: first_epoch_s", "is not epoch_s uncached,"
                scale = phase.first_epoch_s + phase.epoch_s
                close_enough(what, phase.first_epoch_s, phase.epoch_s, scale, relation)
            elif phase.epoch_s < floor:
                # Cached, the steady epoch adds the reads that spill to disk, which depend on
                # the profile's activation sizes the plan does not record: a bound only.
                close_enough(
                    f"phase {i}: epoch_s",
                    phase.epoch_s,
                    floor,
                    phase.epoch_s + floor,
                    f"is below {steps} steps × step_s =",
                )
        total = sum(p.total_s for p in self.phases)
        relation = "is not the sum of the phases' total_s,"
        scale = self.predicted_total_s + total
        close_enough("predicted_total_s", self.predicted_total_s, total, scale, relation)
        return self


class EpochRow(EpochShape):
    epoch: NonNegInt
    epoch_s: NonNegFloat
    samples_per_s: NonNegFloat


class StaticPlanSummary(Strict):
    layout: Layout
    step_s: NonNegFloat
    epoch_s: NonNegFloat
    total_s: NonNegFloat


class AblationRow(Strict):
    name: Text
    total_s: NonNegFloat
    speedup: NonNegFloat = Field(description="Baseline total / this total.")


class FreezeCase(Strict):
    """One freeze schedule a preview prices end to end, and what it assumes."""

    case: Literal["given", "best", "later"] = Field(
        description="given: the one schedule asked for; best and later: the band of "
        "`--freeze auto` (the α bound, and the earliest AutoFreeze's gradient criterion allows)."
    )
    # pipeplan's own words, written and never read: around a trajectory's path (a Text, at
    # most MAX_TEXT) they may be longer than it, and a limit here refused a path it took.
    assumes: Annotated[str, AfterValidator(printable)] = Field(description="The schedule in words.")
    freeze: FreezeSchedule
    total_s: NonNegFloat
    predicted_speedup: NonNegFloat = Field(description="Baseline total / this total.")


class Preview(Strict):
    model: Text
    devices: PosInt
    freeze: Literal["auto", "alpha", "none", "list", "trajectory", "autofreeze"] = Field(
        description="The freezing previewed: auto is a band (best and later case), the others "
        "one schedule."
    )
    cases: list[FreezeCase] = Field(
        description="The schedules priced, best first; epochs, ablation and plan are the first's."
    )
    baseline: StaticPlanSummary
    epochs: list[EpochRow]
    total_s: NonNegFloat
    predicted_speedup: NonNegFloat = Field(
        description="The first case's: for auto the best case, the α bound."
    )
    ablation: list[AblationRow]
    plan: Plan

    @model_validator(mode="after")
    def _throughput_is_what_an_epoch_trains(self) -> Preview:
        # An epoch trains steps_per_epoch × global_batch samples (the partial batch is dropped,
        # as the run does, and a run's record is held to the same): a preview that divided all
        # of --samples overstated it, up to 2× (the twenty-ninth round).
        trained = self.plan.inputs.steps_per_epoch * self.plan.inputs.global_batch
        for n, row in enumerate(self.epochs):
            expected = trained / row.epoch_s if row.epoch_s > 0 else 0.0
            relation = "is not steps_per_epoch × global_batch / epoch_s,"
            scale = row.samples_per_s + expected
            close_enough(f"epochs[{n}].samples_per_s", row.samples_per_s, expected, scale, relation)
        return self
