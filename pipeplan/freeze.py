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
A list shorter than the training is extended with its last value; a longer one given by the
user (--freeze-schedule, `run --freeze`) is refused: the epochs past the end would never be
trained, so the list or --epochs is a mistake. A run's own list on resume is read as it was.

During `pipeplan run`, `AutoFreeze` makes the same decision online (docs/architecture.md §4.14):
none, a list, the α bound, or `auto`, the α bound capped by the gradient criterion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from pipeplan.errors import BadArgumentError, InputFileError, quoted
from pipeplan.formats import FreezePhase, FreezeSchedule
from pipeplan.formats.base import (
    MAX_EPOCHS,
    MAX_SMALL_JSON_BYTES,
    LongInteger,
    check_json,
    check_keys,
    first_error,
    int_list,
    leading_zero,
    other_kind,
    read_input,
    refuse_run_file,
)
from pipeplan.formats.freeze import (  # the α bound and auto's reach: formats check by them
    GRADIENT_MEASUREMENTS,
    TrajectoryFile,
    alpha_frozen_blocks,
    alpha_frozen_layers,
    autofreeze_frozen_layers,
    blocks_to_frozen_layers,
    check_alpha,
    gradient_reach,  # noqa: F401  (pipeplan.freeze's: docs and tests name it so)
)


def alpha_schedule(alpha: float, epochs: int, num_blocks: int) -> FreezeSchedule:
    _check_epochs(epochs)
    _check_alpha_flag(alpha)
    per_epoch = alpha_frozen_layers(alpha, epochs, num_blocks)
    return FreezeSchedule(source="alpha", alpha=alpha, frozen_layers=per_epoch)


def no_freezing(epochs: int) -> FreezeSchedule:
    _check_epochs(epochs)
    return FreezeSchedule(source="none", frozen_layers=[0] * epochs)


def list_schedule(
    frozen_layers: list[int],
    epochs: int,
    num_blocks: int,
    source: str = "list",
    *,
    cut: bool = False,
) -> FreezeSchedule:
    """One frozen-layer count per epoch: `list_schedule([0, 2], 4, 8)` → 0, 2, 2, 2 (a shorter
    list keeps its last value). A longer one is refused, naming its length and --epochs,
    unless `cut`: what a run saved is resumed as it was, not what a user typed."""
    _check_epochs(epochs)
    if not frozen_layers:
        raise BadArgumentError("the freeze schedule is empty; give one value per epoch")
    if len(frozen_layers) > epochs and not cut:
        # Cut, the values past --epochs were dropped without a word (the eighteenth round).
        raise BadArgumentError(
            f"the freeze schedule has {len(frozen_layers)} values, one per epoch, but --epochs "
            f"is {epochs}; give at most {epochs} (a shorter one keeps its last value)"
        )
    limit = num_blocks + 1
    for epoch, value in enumerate(frozen_layers):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            # A file's `true` is named as the file spells it, not as Python's True (the
            # seventy-second round).
            boolean = isinstance(value, bool)
            shown = f"{str(value).lower()} (a boolean)" if boolean else quoted(value)
            raise BadArgumentError(
                f"freeze schedule epoch {epoch}: {shown} is not a frozen-layer count in "
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
    try:
        values = int_list(text)
    except LongInteger as exc:
        raise BadArgumentError(f"--freeze-schedule: {exc}") from None
    if leading_zero(text):
        raise BadArgumentError(f"--freeze-schedule: {leading_zero(text)}")
    if values is None:
        # Not the list, and no file of that name (`names_a_trajectory`): both readings are
        # said, so `./nonexist` is told the file is missing, not that it holds no integers
        # (twenty-ninth round), and a list's typo (0;4) what the list is.
        raise BadArgumentError(
            f"--freeze-schedule: {quoted(text)} is no file (a freeze trajectory) and not the "
            "inline list of frozen-layer counts per epoch (comma-separated integers, like 0,0,3,5)"
        )
    return values


def trajectory(frozen_layers: list[int], epochs: int, num_blocks: int) -> FreezeSchedule:
    """A trajectory given as counts: `trajectory([0, 0, 3], 5, 6)` → frozen 0, 0, 3, 3, 3
    (what a run followed, or followed so far and then a continuation)."""
    return list_schedule(frozen_layers, epochs, num_blocks, source="trajectory")


# What a refusal of a run's file given as a trajectory says to write instead: no command writes
# a trajectory file, and the README's "a trajectory from a run" left the user guessing (the
# thirtieth round gave it every file a run writes).
TRAJECTORY_HINT = (
    "; a trajectory is a JSON list of frozen layers per epoch, [0, 0, 3, 5], or "
    "{\"frozen_layers\": [...]} (a run's: its epoch records' frozen_layers in run.jsonl)"
)


def trajectory_schedule(path: str | Path, epochs: int, num_blocks: int) -> FreezeSchedule:
    """A trajectory file: a JSON list of per-epoch frozen counts, or {"frozen_layers": [...]}
    with the rest of a `FreezeSchedule`'s fields, held to what they say (`TrajectoryFile`).
    `trajectory_schedule("t.json", 5, 12)`: no more counts than epochs."""
    given, path = path, Path(path)  # the text given is read: its trailing slash counts
    try:  # run.jsonl was "not valid JSON (Extra data…)"
        refuse_run_file(path, "freeze trajectory")
    except InputFileError as exc:
        raise InputFileError(f"{exc}{TRAJECTORY_HINT}") from None
    text = read_input(given, MAX_SMALL_JSON_BYTES, why="the limit for a freeze trajectory")
    try:
        data = check_json(text, "")
    except InputFileError as exc:
        raise InputFileError(f"{path}: cannot read freeze trajectory{exc}") from None
    if isinstance(data, dict):
        other = other_kind(TrajectoryFile, data)  # a profile or plan given as the trajectory
        if other is not None:
            raise InputFileError(
                f"{path}: not a freeze trajectory (it is a {other}){TRAJECTORY_HINT}"
            )
        check_keys(data, (TrajectoryFile,), str(path))  # before an error for each key
        try:
            context = {"num_blocks": num_blocks}  # what source alpha freezes depends on them
            data = TrajectoryFile.model_validate(data, strict=True, context=context).frozen_layers
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


def names_a_trajectory(text: str) -> bool:
    """The one rule of `--freeze-schedule VALUE` (preview, plan): whether it names a
    trajectory file rather than being the inline list. Integers and commas are the list,
    always, whatever the current directory holds (twenty-seventh round: a file named 4 there
    turned `--freeze-schedule 4` into that file's schedule; such a file is given as a path,
    ./4). Anything else is a file when named as one (ending in .json) or when it is there
    (a run's trajectory without the suffix, or a folder, then named in the refusal: a run
    directory was "expected comma-separated integers"); otherwise a list that cannot be read.

        names_a_trajectory("0,4")            # False, beside a file named 0,4 too
        names_a_trajectory("./4")            # True
        names_a_trajectory("runs/a/t.json")  # True
    """
    parts = [part.strip() for part in text.split(",")]
    if all(part.isascii() and part.isdigit() for part in parts):
        return False  # list-shaped: read as the list (a leading zero is refused there)
    if text.endswith(".json"):
        return True
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # no file name can be this (too long, a NUL): a list's typo
        return False


def schedule_file(value: object) -> str | None:
    """The trajectory file `--freeze-schedule VALUE` reads (`names_a_trajectory`), or None: an
    input a command's --out must not overwrite. `schedule_file("4")` → None (a list)."""
    return value if isinstance(value, str) and names_a_trajectory(value) else None


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
    if names_a_trajectory(freeze_schedule):
        return trajectory_schedule(freeze_schedule, epochs, num_blocks)
    values = parse_list(freeze_schedule)
    _check_epochs(epochs)  # the flag's fault, not the list's
    try:
        return list_schedule(values, epochs, num_blocks)
    except BadArgumentError as exc:  # as a file's fault names the file: name the flag typed
        raise BadArgumentError(f"--freeze-schedule: {exc}") from None


def phases(schedule: FreezeSchedule) -> list[FreezePhase]:
    """Maximal runs of epochs with the same freeze point, in order."""
    result: list[FreezePhase] = []
    for epoch, frozen in enumerate(schedule.frozen_layers):
        if result and result[-1].frozen_layers == frozen:
            result[-1].epochs += 1
        else:
            result.append(FreezePhase(start_epoch=epoch, epochs=1, frozen_layers=frozen))
    return result


def _check_alpha_flag(alpha: float) -> None:
    try:
        check_alpha(alpha)
    except (ValueError, TypeError) as exc:  # TypeError: not a number (the Python API)
        raise BadArgumentError(f"--alpha {exc}") from None


def _check_epochs(epochs: int) -> None:
    if epochs < 1:
        raise BadArgumentError(f"--epochs must be at least 1 (got {epochs})")
    if epochs > MAX_EPOCHS:  # a schedule holds one value per epoch: checked before building it
        raise BadArgumentError(f"--epochs {epochs} is beyond the limit of {MAX_EPOCHS}")


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

    def decide(self, epoch: int, norms: dict[int, float] | None, frozen_layers: int) -> int:
        """The freeze point from `epoch` on, given the mean gradient norm per layer since the
        last decision (None: none measured, for the decision a resume makes where the run it
        continues ended, by a schedule decided without gradients): never below
        `frozen_layers` (freezing only grows), never the head."""
        if norms is not None and self.mode == "auto":
            self.history.append(norms)
        head = self.num_blocks + 1
        return max(frozen_layers, min(self._proposal(epoch, frozen_layers), head))

    def _proposal(self, epoch: int, frozen_layers: int) -> int:
        if self.mode == "none":
            return 0
        if self.mode == "list":
            listed = self.freeze_list or [0]
            return listed[min(epoch, len(listed) - 1)]
        bound = blocks_to_frozen_layers(alpha_frozen_blocks(self.alpha, epoch, self.num_blocks))
        if self.mode == "alpha":
            return bound
        return min(bound, gradient_freeze_point(self.history, frozen_layers))


# --------------------------------------------------------------------------- what auto can do
# The preview's band and a run's forecast price schedules AutoFreeze may follow; these say
# which (docs/architecture.md §4.13, §4.14).


def autofreeze_earliest(alpha: float, epochs: int, num_blocks: int) -> FreezeSchedule:
    """`--freeze auto` at its fastest, the preview's later-freezing case:
    `autofreeze_earliest(0.3, 10, 8)` → 0, 0, 4, 6, 7, 8, 8, 8, 8, 8
    (`autofreeze_frozen_layers` says why; a trajectory file of source autofreeze is checked
    by it)."""
    _check_epochs(epochs)
    _check_alpha_flag(alpha)
    per_epoch = autofreeze_frozen_layers(alpha, epochs, num_blocks)
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
            "the earliest AutoFreeze can freeze deciding at epoch ends (--freeze-every may "
            f"freeze sooner): its gradient criterion needs {GRADIENT_MEASUREMENTS} epochs' norms, "
            "then freezes at most half the active blocks per epoch, within the α bound "
            f"(α = {schedule.alpha:g})"
        )
    if schedule.source == "none":
        return "nothing frozen"
    if schedule.source == "trajectory":
        return f"the trajectory in {schedule.path}" if schedule.path else "a trajectory"
    return "the list given"
