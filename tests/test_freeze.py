"""Freeze schedules: the α bound, fixed lists, recorded trajectories, phases; AutoFreeze's
decisions during a run, one mode at a time."""

import json

import pytest

from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.formats import dumps
from pipeplan.freeze import (
    AutoFreeze,
    alpha_frozen_blocks,
    alpha_schedule,
    autofreeze_earliest,
    list_schedule,
    no_freezing,
    parse_list,
    phases,
    schedule_from_flags,
    trajectory_schedule,
)


def test_alpha_bound_matches_the_formula():
    # ⌈12·(1−0.7^T)⌉ for T = 0..4
    assert [alpha_frozen_blocks(0.3, t, 12) for t in range(5)] == [0, 4, 7, 8, 10]
    assert alpha_frozen_blocks(0.99, 50, 12) == 12  # never more than every block


def test_alpha_schedule_freezes_embeddings_with_the_first_block():
    schedule = alpha_schedule(0.3, 4, 12)
    assert schedule.frozen_layers == [0, 5, 8, 9]
    assert schedule.source == "alpha"


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_alpha_outside_the_open_unit_interval_is_refused(alpha):
    with pytest.raises(BadArgumentError, match="strictly between 0 and 1"):
        alpha_schedule(alpha, 3, 12)


def test_lists_are_validated_and_extended():
    assert list_schedule([0, 2], 4, 4).frozen_layers == [0, 2, 2, 2]
    # A run's own list, resumed as it was saved: cut, never refused.
    assert list_schedule([0, 2, 3, 5], 2, 4, cut=True).frozen_layers == [0, 2]
    with pytest.raises(BadArgumentError, match="only ever grows"):
        list_schedule([0, 3, 2], 3, 4)
    with pytest.raises(BadArgumentError, match="never frozen"):
        list_schedule([0, 6], 2, 4)
    with pytest.raises(BadArgumentError, match="comma-separated"):
        parse_list("0,a")
    assert parse_list("0, 1,3") == [0, 1, 3]


@pytest.mark.parametrize("given", ["list", "inline", "file"])
def test_a_schedule_longer_than_the_epochs_is_refused(tmp_path, given):
    """Found by the eighteenth round: a list of 5 values for 3 epochs was cut to its first 3
    without a word. `list_schedule([0, 2, 3, 5], 2, 4)` is refused naming both lengths, and
    `--freeze-schedule` (inline or a file) names where the list came from."""
    path = tmp_path / "t.json"
    path.write_text("[0, 2, 3, 5]")
    build = {
        "list": lambda: list_schedule([0, 2, 3, 5], 2, 4),
        "inline": lambda: schedule_from_flags(None, "0,2,3,5", 2, 4),
        "file": lambda: trajectory_schedule(path, 2, 4),
    }[given]
    where = {"list": "", "inline": "--freeze-schedule: ", "file": f"{path}: "}[given]
    error = InputFileError if given == "file" else BadArgumentError
    message = "the freeze schedule has 4 values, one per epoch, but --epochs is 2; give at most 2"
    with pytest.raises(error, match=f"^{where}{message} "):
        build()


def test_trajectory_file(tmp_path):
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps({"frozen_layers": [0, 0, 3]}))
    assert trajectory_schedule(path, 4, 6).frozen_layers == [0, 0, 3, 3]
    path.write_text("[0, 1")
    with pytest.raises(InputFileError, match="cannot read"):
        trajectory_schedule(path, 4, 6)
    with pytest.raises(InputFileError, match="no such file"):
        trajectory_schedule(tmp_path / "missing.json", 4, 6)


@pytest.mark.parametrize(
    "values, error",
    [
        ([0, -1], "epoch 1: -1 is not"),
        ([0, 3, 2], "epoch 2: 2 < 3"),
        ([0, 99], "epoch 1: 99 is not"),
        # The seventy-second round: JSON's `true` was named as Python's True.
        ([0, 2, True], "epoch 2: true \\(a boolean\\) is not"),
        ([False, 2], "epoch 0: false \\(a boolean\\) is not"),
    ],
)
def test_a_trajectory_files_bad_element_names_the_file(tmp_path, values, error):
    """Found by the seventeenth round: `freeze schedule epoch 1: -1 is not a frozen-layer
    count …` named neither the JSON file nor that the value came from one."""
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(values))
    with pytest.raises(InputFileError, match=f"^{path}: freeze schedule {error}"):
        trajectory_schedule(path, 4, 6)


@pytest.mark.parametrize("source", ["trajectory", "list", "none", "alpha", "autofreeze"])
def test_a_written_freeze_schedule_is_a_trajectory_file(tmp_path, source):
    """A FreezeSchedule written out (the demo's freeze-trajectory.json, a preview's case) is
    still read as a trajectory now that a trajectory object's keys are checked (the fifteenth
    round) and held to what they say (the eighteenth), whatever its source."""
    written = {
        "trajectory": lambda: list_schedule([0, 2], 3, 4, "trajectory"),
        "list": lambda: list_schedule([0, 2], 3, 4),
        "none": lambda: no_freezing(3),
        "alpha": lambda: alpha_schedule(0.3, 3, 4),
        "autofreeze": lambda: autofreeze_earliest(0.3, 3, 4),
    }[source]()
    path = tmp_path / "freeze-trajectory.json"
    path.write_text(dumps(written))
    read = trajectory_schedule(path, 4, 4)  # one epoch more: the last value kept
    assert read.frozen_layers == [*written.frozen_layers, written.frozen_layers[-1]]
    assert (read.source, read.alpha, read.path) == ("trajectory", None, str(path))


def test_phases_are_runs_of_the_same_freeze_point():
    schedule = list_schedule([0, 0, 3, 3, 3, 5], 6, 6)
    assert [(p.start_epoch, p.epochs, p.frozen_layers) for p in phases(schedule)] == [
        (0, 2, 0),
        (2, 3, 3),
        (5, 1, 5),
    ]


def test_schedule_from_flags(tmp_path):
    assert schedule_from_flags(None, None, 3, 4).frozen_layers == [0, 0, 0]
    assert schedule_from_flags(0.5, None, 2, 4).frozen_layers == [0, 3]
    assert schedule_from_flags(None, "0,2", 3, 4).frozen_layers == [0, 2, 2]
    path = tmp_path / "t.json"
    path.write_text("[0, 1, 3]")
    assert schedule_from_flags(None, str(path), 3, 4).source == "trajectory"
    with pytest.raises(BadArgumentError, match="not both"):
        schedule_from_flags(0.5, "0,1", 3, 4)


def test_gradient_criterion_freezes_up_to_the_first_still_changing_layer():
    from pipeplan.freeze import gradient_freeze_point

    before = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}
    # Layers 0 and 1 barely change, layer 2 changes a lot: freeze 0 and 1.
    now = {0: 1.01, 1: 0.99, 2: 1.5, 3: 1.2, 4: 1.3, 5: 9.0}
    assert gradient_freeze_point([before, now], 0) == 2
    # From freeze point 3 only layers 3 and 4 compete (5 is the head): 3 changes least.
    assert gradient_freeze_point([before, now], 3) == 4
    # Never unfreezes, and needs two measurements.
    assert gradient_freeze_point([before, now], 5) == 5
    assert gradient_freeze_point([now], 0) == 0
    # Everything changing alike: the first active layer is at the median, nothing new frozen.
    same = {k: 2.0 for k in before}
    assert gradient_freeze_point([before, same], 1) == 1


def test_autofreeze_none_never_freezes_more():
    never = AutoFreeze("none", num_blocks=4)
    assert never.first == 0
    assert [never.decide(epoch, {0: 1.0}, 0) for epoch in range(3)] == [0, 0, 0]
    assert never.decide(1, {}, 3) == 3  # nor unfreezes
    assert never.history == []


def test_autofreeze_list_follows_the_list_then_repeats_its_last_value():
    listed = AutoFreeze("list", num_blocks=4, freeze_list=[0, 2, 3])
    assert listed.first == 0
    assert [listed.decide(epoch, {}, 0) for epoch in range(5)] == [0, 2, 3, 3, 3]
    assert listed.decide(1, {}, 4) == 4  # freezing only grows
    assert AutoFreeze("list", num_blocks=4, freeze_list=[2, 3]).first == 2  # may start frozen
    beyond = AutoFreeze("list", num_blocks=4, freeze_list=[0, 9])
    assert beyond.decide(1, {}, 0) == 5  # never the head
    assert AutoFreeze("list", num_blocks=4).decide(3, {}, 0) == 0  # an empty list freezes nothing


def test_autofreeze_alpha_is_the_alpha_bound():
    bound = AutoFreeze("alpha", num_blocks=12, alpha=0.3)
    # ⌈12·(1−0.7^T)⌉ blocks, plus the embeddings once anything is frozen
    assert [bound.decide(epoch, {}, 0) for epoch in range(5)] == [0, 5, 8, 9, 11]
    assert bound.decide(1, {}, 7) == 7
    assert bound.history == []  # the gradients are not consulted


def test_autofreeze_auto_is_the_alpha_bound_capped_by_the_gradient_criterion():
    before = {i: 1.0 for i in range(7)}  # 5 blocks: layers 0..6, the head is 6
    now = {0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0, 4: 2.0, 5: 2.0, 6: 5.0}
    auto = AutoFreeze("auto", num_blocks=5, alpha=0.5)
    assert auto.decide(1, before, 0) == 0  # one measurement: the criterion keeps k
    assert auto.decide(2, now, 0) == 3  # the criterion (3) under the α bound (5)
    assert auto.history == [before, now]
    capped = AutoFreeze("auto", num_blocks=5, alpha=0.2, history=[before])
    assert capped.decide(1, now, 0) == 2  # the α bound (⌈5·0.2⌉ block + embeddings) under 3
    assert capped.decide(2, now, 4) == 4  # never unfreezes


def test_autofreeze_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="not one of"):
        AutoFreeze("sometimes", num_blocks=4)
