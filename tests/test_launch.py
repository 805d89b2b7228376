"""A failing rank's report and the launcher's verdict: the rank that failed first is named,
not the first to notice."""

import json

import pytest

from executor import faults

# ----------------------------------------------------------------------------- the verdict


class Failure:
    """What the verdict reads of torch's ProcessFailure."""

    def __init__(self, exitcode: int, report: faults.Report | None = None):
        self.exitcode = exitcode
        self.error_file_data = {"message": "<NONE>"}
        if report is not None:
            self.error_file_data = json.loads(report.to_json())


def report(rank: int, kind: str, at: float, message: str = "m") -> faults.Report:
    return faults.Report(rank=rank, kind=kind, time=at, message=message)


@pytest.mark.parametrize(
    "failures, expected",
    [
        # the rank that raised first, though another noticed and failed earlier
        (
            {0: Failure(1, report(0, "lost", 1.0)), 1: Failure(1, report(1, "raised", 2.0, "E"))},
            (1, "E"),
        ),
        (
            {
                0: Failure(1, report(0, "raised", 3.0, "A")),
                2: Failure(1, report(2, "raised", 2.0, "B")),
            },
            (2, "B"),
        ),
        # a rank killed without a word, while the agent stopped another with SIGTERM
        (
            {0: Failure(1, report(0, "lost", 1.0)), 1: Failure(-9), 2: Failure(-15)},
            (1, "killed by SIGKILL"),
        ),
        (
            {0: Failure(1, report(0, "timeout", 1.0)), 1: Failure(-9)},
            (1, "no response within the collective timeout of 5 s (stopped or hung)"),
        ),
        ({0: Failure(1, report(0, "lost", 1.0)), 1: Failure(3)}, (1, "exited with code 3")),
        (
            {
                1: Failure(1, report(1, "lost", 2.0, "B")),
                0: Failure(1, report(0, "lost", 1.0, "A")),
            },
            (0, "A"),
        ),
    ],
)
def test_the_verdict_names_the_first_to_fail(failures, expected):
    assert faults.verdict(failures, timeout_s=5) == expected


@pytest.mark.parametrize(
    "exc, kind",
    [
        (KeyboardInterrupt(), "interrupted"),
        (ValueError("bad sample"), "raised"),
        (RuntimeError("[../gloo/transport/tcp/pair.cc:537] Connection reset by peer"), "lost"),
        (
            RuntimeError("[../gloo/unbound_buffer.cc:78] Timed out waiting 5000ms for recv"),
            "timeout",
        ),
    ],
)
def test_a_rank_classifies_its_own_failure(exc, kind):
    assert faults.classify(exc) == kind
