"""Freeze schedules: how many leading layers are frozen in each epoch, and the phases they make.

Everything here counts `frozen_layers`: the number of leading layers of the layer sequence
(0 = embeddings, 1..n = blocks, n+1 = head) that are frozen. 0 means nothing is frozen;
k + 1 means embeddings and blocks 1..k are frozen (the freeze point k). The head is never
frozen, so frozen_layers ≤ n + 1. Freezing only ever grows.

Three sources:
- the α bound of PipeTransformer/AutoFreeze: at epoch T (from 0) at most ⌈L·(1−(1−α)^T)⌉ of
  the L blocks are frozen; the embeddings freeze with the first block;
- a fixed list, one frozen_layers value per epoch;
- a trajectory recorded by an earlier run: a JSON list of per-epoch frozen_layers, or an
  object with a "frozen_layers" list.
Lists shorter than the training are extended with their last value; longer ones are cut.

During `pipeplan run`, `AutoFreeze` makes the same decision online (docs/architecture.md §4.14):
none, a list, the α bound, or `auto`, the α bound capped by the gradient criterion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.formats import FreezePhase, FreezeSchedule
from pipeplan.formats.base import (
    MAX_EPOCHS,
    MAX_SMALL_JSON_BYTES,
    check_json,
    first_error,
    int_list,
    leading_zero,
    other_kind,
    read_input,
)
from pipeplan.formats.freeze import (  # the α bound: the plan format checks by it
    TrajectoryFile,
    alpha_frozen_blocks,
    alpha_frozen_layers,
    blocks_to_frozen_layers,
    check_alpha,
)


def alpha_schedule(alpha: float, epochs: int, num_blocks: int) -> FreezeSchedule:
    _check_epochs(epochs)
    try:
        check_alpha(alpha)
    except (ValueError, TypeError) as exc:  # TypeError: not a number (the Python API)
        raise BadArgumentError(f"--alpha {exc}") from None
    per_epoch = alpha_frozen_layers(alpha, epochs, num_blocks)
    return FreezeSchedule(source="alpha", alpha=alpha, frozen_layers=per_epoch)


def no_freezing(epochs: int) -> FreezeSchedule:
    _check_epochs(epochs)
    return FreezeSchedule(source="none", frozen_layers=[0] * epochs)


def list_schedule(
    frozen_layers: list[int], epochs: int, num_blocks: int, source: str = "list"
) -> FreezeSchedule:
    _check_epochs(epochs)
    if not frozen_layers:
        raise BadArgumentError("the freeze schedule is empty; give one value per epoch")
    limit = num_blocks + 1
    for epoch, value in enumerate(frozen_layers):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            raise BadArgumentError(
                f"freeze schedule epoch {epoch}: {value!r} is not a frozen-layer count in "
                f"0..{limit} (the head, layer {limit}, is never frozen)"
            )
    for epoch in range(1, len(frozen_layers)):
        if frozen_layers[epoch] < frozen_layers[epoch - 1]:
            raise BadArgumentError(
                f"freeze schedule epoch {epoch}: {frozen_layers[epoch]} < "
                f"{frozen_layers[epoch - 1]}; freezing only ever grows"
            )
    per_epoch = (list(frozen_layers) + [frozen_layers[-1]] * epochs)[:epochs]
    return FreezeSchedule(source=source, frozen_layers=per_epoch)  # type: ignore[arg-type]


def parse_list(text: str) -> list[int]:
    """'0,0,3,5' → [0, 0, 3, 5] (the --freeze-schedule flag's inline form)."""
    values = int_list(text)
    if leading_zero(text):
        raise BadArgumentError(f"--freeze-schedule: {leading_zero(text)}")
    if values is None:
        raise BadArgumentError(
            f"cannot read freeze schedule '{text}' (expected comma-separated integers)"
        )
    return values


def trajectory(frozen_layers: list[int], epochs: int, num_blocks: int) -> FreezeSchedule:
    """A trajectory given as counts: `trajectory([0, 0, 3], 5, 6)` → frozen 0, 0, 3, 3, 3
    (what a run followed, or followed so far and then a continuation)."""
    return list_schedule(frozen_layers, epochs, num_blocks, source="trajectory")


def trajectory_schedule(path: str | Path, epochs: int, num_blocks: int) -> FreezeSchedule:
    """A trajectory file: a JSON list of per-epoch frozen counts, or {"frozen_layers": [...]}."""
    path = Path(path)
    text = read_input(path, MAX_SMALL_JSON_BYTES, why="the limit for a freeze trajectory")
    try:
        data = check_json(text, "")
    except InputFileError as exc:
        raise InputFileError(f"{path}: cannot read freeze trajectory{exc}") from None
    if isinstance(data, dict):
        other = other_kind(TrajectoryFile, data)  # a profile or plan given as the trajectory
        if other is not None:
            raise InputFileError(f"{path}: not a freeze trajectory (it is a {other})")
        try:
            data = TrajectoryFile.model_validate(data, strict=True).frozen_layers
        except ValidationError as exc:
            raise InputFileError(f"{path}: invalid freeze trajectory: {first_error(exc)}") from None
    if not isinstance(data, list):
        raise InputFileError(
            f"{path}: expected a JSON list of frozen-layer counts or an object with 'frozen_layers'"
        )
    _check_epochs(epochs)  # the flag's fault, not the file's
    try:
        schedule = trajectory(data, epochs, num_blocks)
    except BadArgumentError as exc:  # an element's fault is the file's: name it
        raise InputFileError(f"{path}: {exc}") from None
    schedule.path = str(path)
    return schedule


def _names_a_file(text: str) -> bool:
    """Whether `text` names an existing file; a text no file name can be (too long, a NUL) is
    an inline list to read, not an OSError about a file nobody named."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def schedule_from_flags(
    alpha: float | None, freeze_schedule: str | None, epochs: int, num_blocks: int
) -> FreezeSchedule:
    """--alpha A, or --freeze-schedule given as a JSON file (a recorded trajectory) or an
    inline list '0,0,3,5'; neither means nothing is frozen."""
    if alpha is not None and freeze_schedule is not None:
        raise BadArgumentError("give --alpha or --freeze-schedule, not both")
    if alpha is not None:
        return alpha_schedule(alpha, epochs, num_blocks)
    if freeze_schedule is None:
        return no_freezing(epochs)
    if freeze_schedule.endswith(".json") or _names_a_file(freeze_schedule):
        return trajectory_schedule(freeze_schedule, epochs, num_blocks)
    return list_schedule(parse_list(freeze_schedule), epochs, num_blocks)


def phases(schedule: FreezeSchedule) -> list[FreezePhase]:
    """Maximal runs of epochs with the same freeze point, in order."""
    result: list[FreezePhase] = []
    for epoch, frozen in enumerate(schedule.frozen_layers):
        if result and result[-1].frozen_layers == frozen:
            result[-1].epochs += 1
        else:
            result.append(FreezePhase(start_epoch=epoch, epochs=1, frozen_layers=frozen))
    return result


def _check_epochs(epochs: int) -> None:
    if epochs < 1:
        raise BadArgumentError(f"--epochs must be at least 1 (got {epochs})")
    if epochs > MAX_EPOCHS:  # a schedule holds one value per epoch: checked before building it
        raise BadArgumentError(f"--epochs {epochs} is beyond the limit of {MAX_EPOCHS}")


# The gradient criterion compares the norms of the last two decisions: it cannot freeze
# anything before it has this many.
GRADIENT_MEASUREMENTS = 2


def gradient_freeze_point(history: list[dict[int, float]], frozen_layers: int) -> int:
    """AutoFreeze's gradient criterion on per-layer gradient norms measured at each decision.

    A layer's change rate is |g_t − g_{t−1}| / g_{t−1} between the last two decisions; layers
    whose gradients have stopped changing have converged. Freeze up to (not including) the
    first active layer whose rate is at least the median rate of the active layers; the head
    never counts. With fewer than two measurements nothing new is frozen.
    """
    if len(history) < GRADIENT_MEASUREMENTS:
        return frozen_layers
    before, now = history[-2], history[-1]
    rates = {}
    for layer in sorted(now):
        if layer >= frozen_layers and layer in before and before[layer] > 0:
            rates[layer] = abs(now[layer] - before[layer]) / before[layer]
    if not rates:
        return frozen_layers
    head = max(rates) if len(rates) > 1 else None  # the last layer measured is the head
    candidates = {k: v for k, v in rates.items() if k != head}
    if not candidates:
        return frozen_layers
    median = sorted(candidates.values())[len(candidates) // 2]
    for layer in sorted(candidates):
        if candidates[layer] >= median:
            return max(frozen_layers, layer)
    return frozen_layers


FREEZE_MODES = ("none", "list", "alpha", "auto")


@dataclass
class AutoFreeze:
    """The freeze decision of a run: rank 0 asks it at each decision point, the trainer
    broadcasts the answer. `history` holds, per `auto` decision, the mean gradient norm of each
    layer since the previous one; checkpoints save it, so a resumed run decides alike."""

    mode: str  # one of FREEZE_MODES
    num_blocks: int
    alpha: float = 0.3
    freeze_list: list[int] = field(default_factory=list)
    history: list[dict[int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in FREEZE_MODES:
            raise ValueError(f"freeze mode {self.mode!r} is not one of {FREEZE_MODES}")

    @property
    def first(self) -> int:
        """The freeze point training starts at: a fixed list may start frozen (fine-tuning)."""
        return self.freeze_list[0] if self.mode == "list" and self.freeze_list else 0

    def decide(self, epoch: int, norms: dict[int, float], frozen_layers: int) -> int:
        """The freeze point from `epoch` on, given the mean gradient norm per layer since the
        last decision: never below `frozen_layers` (freezing only grows), never the head."""
        head = self.num_blocks + 1
        return max(frozen_layers, min(self._proposal(epoch, norms, frozen_layers), head))

    def _proposal(self, epoch: int, norms: dict[int, float], frozen_layers: int) -> int:
        if self.mode == "none":
            return 0
        if self.mode == "list":
            listed = self.freeze_list or [0]
            return listed[min(epoch, len(listed) - 1)]
        bound = blocks_to_frozen_layers(alpha_frozen_blocks(self.alpha, epoch, self.num_blocks))
        if self.mode == "alpha":
            return bound
        self.history.append(norms)
        return min(bound, gradient_freeze_point(self.history, frozen_layers))


# --------------------------------------------------------------------------- what auto can do
# The preview's band and a run's forecast price schedules AutoFreeze may follow; these say
# which (docs/architecture.md §4.13, §4.14).


def gradient_reach(frozen_layers: int, num_blocks: int) -> int:
    """The most one gradient decision can freeze: `gradient_reach(0, 8)` → 4.

    Its candidates are the c active layers below the head, frozen_layers..num_blocks; at most
    ⌊c/2⌋ of them lie below the upper median of their rates, so the first candidate at or
    above it, where freezing stops, is at most ⌊c/2⌋ past the first. Half of what is still
    active per decision, and never the last block (c = 1 stops at once)."""
    candidates = max(0, num_blocks + 1 - frozen_layers)
    return frozen_layers + candidates // 2


def autofreeze_earliest(alpha: float, epochs: int, num_blocks: int) -> FreezeSchedule:
    """`--freeze auto` at its fastest, the preview's later-freezing case:
    `autofreeze_earliest(0.3, 10, 8)` → 0, 0, 4, 6, 7, 8, 8, 8, 8, 8.

    AutoFreeze decides at each epoch end (the default, no --freeze-every); the decision for
    epoch t is its t-th, so the gradient criterion has t measurements and cannot freeze
    before epoch GRADIENT_MEASUREMENTS; from then on each decision freezes at most
    `gradient_reach` and never beyond the α bound. A real run freezes no earlier than this,
    and may freeze later still, or never."""
    bound = alpha_schedule(alpha, epochs, num_blocks).frozen_layers
    per_epoch, frozen = [], 0
    for epoch in range(epochs):
        if epoch >= GRADIENT_MEASUREMENTS:
            frozen = max(frozen, min(bound[epoch], gradient_reach(frozen, num_blocks)))
        per_epoch.append(frozen)
    return FreezeSchedule(source="autofreeze", alpha=alpha, frozen_layers=per_epoch)


# How a run's forecast continues the epochs it has finished: the rest of a schedule decided
# without gradients (none, list, alpha), or for auto the two bounds on what it can still do.
CONTINUATION_WORDS = {
    "schedule": "the run's own schedule",
    "no-further-freezing": "no further freezing",
    "alpha-bound": "the α bound from here",
}


def continuations(
    mode: str,
    alpha: float,
    freeze_list: list[int],
    num_blocks: int,
    finished: list[int],
    epochs: int,
) -> list[tuple[str, FreezeSchedule]]:
    """The whole-run schedules a forecast prices after the epochs `finished` (their frozen
    counts, at least one): `continuations("auto", 0.3, [], 8, [0, 0], 4)` →
    [("no-further-freezing", 0, 0, 0, 0), ("alpha-bound", 0, 0, 6, 7)].

    none, list and alpha decide without gradients, so the rest is known: one schedule, the
    decisions `AutoFreeze` will make. auto gets two, bounds on what it can still freeze: none
    more (the least), and the α bound, which auto never exceeds (the most). More freezing is
    not always faster: in a short run a transition can cost more than it saves."""
    if not finished:
        raise ValueError("a forecast continues at least one finished epoch")

    def continued(rule: AutoFreeze | None) -> FreezeSchedule:
        per_epoch = list(finished)
        while len(per_epoch) < epochs:
            now = per_epoch[-1]
            per_epoch.append(now if rule is None else rule.decide(len(per_epoch), {}, now))
        return trajectory(per_epoch, epochs, num_blocks)

    if mode == "auto":
        alpha_rule = AutoFreeze("alpha", num_blocks, alpha)
        return [("no-further-freezing", continued(None)), ("alpha-bound", continued(alpha_rule))]
    return [("schedule", continued(AutoFreeze(mode, num_blocks, alpha, list(freeze_list))))]


def compact(frozen_layers: list[int]) -> str:
    """Frozen layers per epoch, repeats counted: `compact([0, 4, 6, 6, 6])` → '0 4 6×3'."""
    runs: list[list[int]] = []
    for value in frozen_layers:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return " ".join(str(v) if n == 1 else f"{v}×{n}" for v, n in runs)


def describe(schedule: FreezeSchedule) -> str:
    """What a schedule assumes, in words: `describe(alpha_schedule(0.3, 4, 8))` → 'the α bound,
    α = 0.3'."""
    if schedule.source == "alpha":
        return f"the α bound, α = {schedule.alpha:g}"
    if schedule.source == "autofreeze":
        return (
            f"the earliest AutoFreeze can freeze: its gradient criterion needs "
            f"{GRADIENT_MEASUREMENTS} epochs' norms, then freezes at most half the active blocks "
            f"per epoch, within the α bound (α = {schedule.alpha:g})"
        )
    if schedule.source == "none":
        return "nothing frozen"
    if schedule.source == "trajectory":
        return f"the trajectory in {schedule.path}" if schedule.path else "a trajectory"
    return "the list given"
