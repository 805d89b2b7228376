"""The per-epoch chart of `pipeplan report --plot` draws each epoch's held-out loss and accuracy
as the run recorded them; a preview's chart, which has none, keeps its single panel."""

from __future__ import annotations

from pathlib import Path

from test_report import elastic_records, write_run

from pipeplan.formats import STEP_RECORDS, EpochRecord
from pipeplan.plots import _epochs_figure
from pipeplan.report import make_report, write_report_plots

# Per epoch: (held-out loss, accuracy); epoch 1 has no loss recorded, epoch 2 neither value.
RESULTS = [(0.91, 0.5), (None, 0.8), (None, None), (0.37, 0.875)]


def run_with_results(directory: Path) -> Path:
    records = elastic_records()
    last_epoch = [r for r in records if isinstance(r, EpochRecord)][-1]
    steps = [r for r in records if isinstance(r, STEP_RECORDS) and r.epoch == last_epoch.epoch]
    extra = range(last_epoch.epoch + 1, len(RESULTS))
    for epoch in extra:  # each its own steps (copies of the last's), as an epoch record counts
        first = steps[-1].step + 1 + (epoch - extra.start) * len(steps)
        records += [
            s.model_copy(update=dict(step=first + i, epoch=epoch)) for i, s in enumerate(steps)
        ]
        records.append(last_epoch.model_copy(update=dict(epoch=epoch)))
    epochs = iter(RESULTS)
    for i, record in enumerate(records):
        if isinstance(record, EpochRecord):
            loss, accuracy = next(epochs)
            records[i] = record.model_copy(update=dict(eval_loss=loss, eval_accuracy=accuracy))
    return write_run(directory, records)


def lines_by_label(figure) -> dict:
    return {line.get_label(): line for ax in figure.axes for line in ax.get_lines()}


def test_the_report_chart_plots_the_recorded_held_out_loss_and_accuracy(tmp_path):
    run_dir = run_with_results(tmp_path / "run")
    report = make_report(run_dir)
    lines = lines_by_label(_epochs_figure(report.epochs))
    for label, column in (("held-out loss", 0), ("held-out accuracy", 1)):
        recorded = [(e, r[column]) for e, r in enumerate(RESULTS) if r[column] is not None]
        assert lines[label].get_xydata().tolist() == [list(p) for p in recorded]
    # The chart the command writes is that figure.
    written = write_report_plots(report, tmp_path / "plots")
    assert (tmp_path / "plots" / "epochs.png") in written


def test_a_chart_without_results_keeps_one_panel():
    rows = [
        {"epoch": 0, "samples_per_s": 10.0, "stages": 2, "replicas": 1, "frozen_layers": 0},
        {"epoch": 1, "samples_per_s": 20.0, "stages": 1, "replicas": 2, "frozen_layers": 3},
    ]
    figure = _epochs_figure(rows)
    assert len(figure.axes) == 2  # throughput and its twin: no results panel
    assert "held-out loss" not in lines_by_label(figure)
    rows[1]["eval_accuracy"] = 0.5
    assert lines_by_label(_epochs_figure(rows))["held-out accuracy"].get_xydata().tolist() == [
        [1.0, 0.5]
    ]
