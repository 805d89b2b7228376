"""One launch path: `pipeplan run` starts its ranks through torch's elastic launcher, torchrun
runs the same worker (the README's commands, verbatim), and every fault ends the run with its
exit code and exactly one line naming the rank that failed first."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rank_processes

from executor import faults

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PIPEPLAN = [sys.executable, "-m", "cli"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def environment(**extra: str) -> dict[str, str]:
    """This interpreter's environment, the checkout first on the path, and test switches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_TEST_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the run ended before it paused"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# ----------------------------------------------------------------------------- faults


def start_run(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """`pipeplan run` on 2 ranks in a process of its own, its stderr piped."""
    command = [*PIPEPLAN, "run", "--nproc", "2", "--epochs", "1", "--freeze", "none"]
    return subprocess.Popen(
        [*command, *args, "--runs-dir", str(tmp_path), "--name", "k"],
        cwd=ROOT,
        env=environment(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def paused_run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """A run whose rank 1 has paused mid-step; returns it and rank 1's pid."""
    paused = tmp_path / "paused"
    run = start_run(
        tmp_path,
        "--data",
        "tests.killer_data:digits_pause_once",
        *args,
        PIPEPLAN_TEST_PAUSE_AFTER="200",
        PIPEPLAN_TEST_PAUSE_RANK="1",
        PIPEPLAN_TEST_PAUSED=str(paused),
    )
    wait_for(paused, run)
    return run, rank_processes(tmp_path / "k")[1]


def one_line(run: subprocess.Popen, code: int, pattern: str, timeout: float = 120) -> str:
    """The run's whole stderr is one line matching `pattern`, and its exit code is `code`."""
    _, err = run.communicate(timeout=timeout)
    assert run.returncode == code, err
    assert len(err.splitlines()) == 1 and re.fullmatch(pattern, err.strip()), err
    return err


def no_rank_left(tmp_path: Path) -> bool:
    return rank_processes(tmp_path / "k") == {}


LOGS = r" \(at step \d+\); rank logs in .*/k/logs"


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_rank_that_raises_is_named_with_its_error(tmp_path):
    run = start_run(tmp_path, "--data", "tests.killer_data:digits_then_raise")
    one_line(
        run,
        2,
        r"pipeplan: error: training failed on rank 1: ValueError: sample \d+ is "
        r"unreadable" + LOGS,
    )
    assert no_rank_left(tmp_path)
    assert "Traceback" in (tmp_path / "k" / "logs" / "rank-1.log").read_text()


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "sig, what", [(signal.SIGKILL, "killed by SIGKILL"), (signal.SIGINT, "interrupted by SIGINT")]
)
def test_a_signalled_rank_is_named_not_the_rank_that_noticed(tmp_path, sig, what):
    run, rank1 = paused_run(tmp_path)
    os.kill(rank1, sig)
    one_line(run, 2, f"pipeplan: error: training failed on rank 1: {what}" + LOGS)
    assert no_rank_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_stopped_rank_ends_the_run_after_the_collective_timeout(tmp_path):
    run, rank1 = paused_run(tmp_path, "--collective-timeout", "5")
    stopped = time.monotonic()
    os.kill(rank1, signal.SIGSTOP)
    try:
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1: no response within the "
            r"collective timeout of 5 s \(stopped or hung\)" + LOGS,
        )
    finally:
        if run.poll() is None:
            os.kill(rank1, signal.SIGKILL)
    # the timeout, torch's 30 s grace before it kills a rank that ignored SIGTERM, a margin
    assert time.monotonic() - stopped < 5 + 30 + 25
    assert no_rank_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_ctrl_c_prints_interrupted_exits_130_and_leaves_no_process(tmp_path):
    run, _ = paused_run(tmp_path)
    run.send_signal(signal.SIGINT)
    one_line(run, 130, "pipeplan: interrupted")
    assert no_rank_left(tmp_path)


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
