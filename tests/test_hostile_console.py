"""A console that fails: stdout or stderr a pipe whose reader has gone (`pipeplan … | head`),
a full device (`> /dev/full`), a closed descriptor (`>&-`). A closed pipe ends the output,
never the work, in silence, with the work's exit status; any other failure of stdout is one
line and exit 2 after the work; a failed stderr changes nothing but what is seen. Each
command runs as the user runs it: `python cli.py …` in a fresh process.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import elastic_records, write_run

import cli
from executor.planning import shipped_profile
from pipeplan import log

ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(shipped_profile("bert-tiny", "cpu"))
PLAN = ["plan", "--profile", PROFILE, "--devices-per-node", "4"]
PREVIEW = ["preview", "--profile", PROFILE, "--devices-per-node", "4"]
STDOUT_FAILED = "pipeplan: error: could not write the output to standard output: "


def command(
    args: list[str], closed: tuple[str, ...] = (), shell: str = "", timeout: float = 60
) -> tuple[int, str, str]:
    """`pipeplan ARGS` in a fresh process, each stream named in `closed` ("stdout",
    "stderr") a pipe whose read end is closed before it starts (every write: EPIPE), the
    others captured; `shell`: a redirection of the command's (`>/dev/full`, `>&-`).
    (exit status, stdout, stderr); "" for a closed stream."""
    argv = [sys.executable, str(ROOT / "cli.py"), *args]
    if shell:
        argv = ["bash", "-c", f'exec "$@" {shell}', "bash", *argv]
    read, write = os.pipe()
    os.close(read)
    streams = {name: write if name in closed else subprocess.PIPE for name in ("stdout", "stderr")}
    try:
        done = subprocess.run(argv, cwd=ROOT, timeout=timeout, text=True, **streams)
    finally:
        os.close(write)
    return done.returncode, done.stdout or "", done.stderr or ""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run's records (no training), enough for `report`."""
    return write_run(tmp_path_factory.mktemp("console") / "n", elastic_records())


def test_report_into_a_closed_pipe_exits_0_in_silence_and_writes_its_plots(run_dir, tmp_path):
    """Found by the thirty-ninth round: `pipeplan report RUN | head -n 1` exited 1 with
    nothing on stderr (rich's reaction to EPIPE is a silent `exit 1`), where `git log |
    head` exits 0: the reader wanted no more."""
    plots = tmp_path / "plots"
    said = command(["report", str(run_dir), "--plot", str(plots)], closed=("stdout",))
    assert said == (0, "", f"wrote {len(list(plots.iterdir()))} plots to {plots}\n"), said
    assert list(plots.glob("*.png"))


@pytest.mark.parametrize(
    "args",
    [PREVIEW, ["schema", "plan"], ["--version"], ["plan", "--help"]],
    ids=["preview", "schema", "version", "help"],
)
def test_tables_prints_and_help_into_a_closed_pipe_exit_0_in_silence(args):
    """Found by the thirty-ninth round: `preview | head -c 5` exited 0 or 1 by timing (rich's
    tables), and `print` (schema, --version) and click's help into a closed pipe exited 1,
    with nothing said."""
    assert command(args, closed=("stdout",)) == (0, "", "")


@pytest.mark.parametrize("closed", [("stdout",), ("stderr",), ("stdout", "stderr")], ids=str)
def test_plan_into_closed_pipes_exits_0_and_writes_the_plan(tmp_path, closed):
    """Found by the thirty-ninth round: `plan` whose stderr was a closed pipe exited 1 after
    writing its plan (its first line there raised). Each stream closed, and both."""
    out = tmp_path / "plan.json"
    status, _, err = command([*PLAN, "--out", str(out)], closed=closed)
    assert status == 0 and json.loads(out.read_text())["phases"], err
    assert "stderr" in closed or f"wrote {out} " in err, err


def test_an_error_line_into_a_closed_stderr_keeps_exit_code_2():
    """Found by the thirty-ninth round: a refused command whose stderr is a closed pipe
    exited 1 with a BrokenPipeError traceback (into the void) instead of 2."""
    assert command(["schema", "nonsense"], closed=("stderr",))[0] == 2
    assert command(["schema", "nonsense"], closed=("stdout", "stderr"))[0] == 2


def test_a_full_stdout_is_one_line_and_exit_2_after_the_work(run_dir, tmp_path):
    """`> /dev/full`: the output asked for is lost, so it is one line and exit 2 (a short
    one, `--version`, was flushed only as the process ended); `plan` prints nothing on
    stdout, so its plan is written and it exits 0."""
    full = f"{STDOUT_FAILED}No space left on device\n"
    assert command(["report", str(run_dir)], shell=">/dev/full") == (2, "", full)
    assert command(["--version"], shell=">/dev/full") == (2, "", full)
    out = tmp_path / "plan.json"
    assert command([*PLAN, "--out", str(out)], shell=">/dev/full")[0] == 0
    assert out.is_file()


def test_a_closed_stdout_is_one_line_and_exit_2_only_when_written():
    """Found by the thirty-ninth round: with descriptor 1 closed (`>&-`) Python has no
    sys.stdout, and every command ended in an AttributeError traceback at its last flush,
    exit 1. A command that prints there fails in one line; one that prints nothing there
    (a refusal, on stderr) is unaffected."""
    closed = f"{STDOUT_FAILED}Bad file descriptor\n"
    assert command(["schema", "plan"], shell=">&-") == (2, "", closed)
    status, _, err = command(["schema", "nonsense"], shell=">&-")
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("pipeplan: error: unknown schema"), err


def _under_file_size_limit(limit: int) -> None:
    """The child's `ulimit -f`, as a shell's: a write past `limit` bytes fails with EFBIG
    (SIGXFSZ ignored, as Python and pipeplan have it), where the signal would end it."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("args", "unbuffered"),
    [
        (["report", "RUN", "--json"], "1"),
        ([*PREVIEW, "--json"], "1"),
        (["models"], "1"),
        (["models"], ""),
    ],
    ids=["report-json", "preview-json", "models", "models-buffered"],
)
def test_stdout_cut_by_a_file_size_limit_is_one_line_naming_it_and_exit_2(
    args, unbuffered, run_dir, tmp_path
):
    """Found by the forty-third round: under `ulimit -f 1`, `report --json`, `preview
    --json` and `models` into a file kept its first 1,024 bytes (a JSON object cut
    mid-token) and exited 0 with nothing said: under PYTHONUNBUFFERED=1 stdout handed each
    output to the file in one write, and the short write it got was taken as whole. Now the
    rest is written, fails with EFBIG, and the limit is named as every file writer names it.
    Without PYTHONUNBUFFERED Python's buffer already retried; the line is the same."""
    args = [str(run_dir) if arg == "RUN" else arg for arg in args]
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    with out.open("wb") as stdout:
        done = subprocess.run(
            [sys.executable, str(ROOT / "cli.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            preexec_fn=lambda: _under_file_size_limit(1024),
        )
    limit = "File too large: the file size limit, ulimit -f, is 1024 bytes"
    assert (done.returncode, done.stderr) == (2, f"{STDOUT_FAILED}{limit}\n")
    assert out.stat().st_size == 1024  # cut at the limit: the output was longer


def test_any_failure_of_stdout_but_a_closed_pipe_is_exit_2_and_one_line(capsys):
    """The rule, without a process: a closed pipe keeps the work's status in silence, any
    other failure (here EIO) turns a success into one line and exit 2, and a failed command
    keeps its own line and status."""

    class Failing:
        def __init__(self, code: int) -> None:
            self.code = code

        def write(self, text: str) -> int:
            raise OSError(self.code, os.strerror(self.code))

        def flush(self) -> None:
            pass

        def fileno(self) -> int:
            raise OSError(errno.EBADF, "no descriptor")  # nothing to put /dev/null on

    for code, status, line in [
        (errno.EPIPE, 0, ""),
        (errno.EIO, 2, f"{STDOUT_FAILED}Input/output error\n"),
    ]:
        out = log.Output(Failing(code))
        assert out.write("table\n") == len("table\n")  # never raised
        assert out.failure.errno == code
        assert (cli._output_status(0, out), capsys.readouterr().err) == (status, line)
        assert (cli._output_status(130, out), capsys.readouterr().err) == (130, "")


def test_a_ranks_closed_console_does_not_fail_the_rank(tmp_path):
    """Found by the thirty-ninth round: `pipeplan run` whose stderr was a closed pipe
    trained to the end, then rank 0's last flush of its console (its INFO lines go there)
    raised BrokenPipeError and the run failed with exit 1 (`--- Logging error ---` in its
    log). A rank's console is an `Output`: the run's lines are lost, not the run."""
    code = (
        "import logging\n"
        "from pathlib import Path\n"
        "from executor.launch import rank_console\n"
        "from pipeplan import log\n"
        f"console = rank_console(Path({str(tmp_path)!r}), 0)\n"
        "log.setup(rank=0, stream=console)\n"
        "logging.getLogger('pipeplan.worker').info('epoch 1/1')\n"
        "console.flush()  # as the rank's end does\n"
        "print('trained', flush=True)\n"
    )
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, timeout=60, stderr=write, stdout=write
        )
    finally:
        os.close(write)
    assert done.returncode == 0
    logged = (tmp_path / "rank-0.log").read_text()
    assert logged.endswith("trained\n") and "Error" not in logged, logged


@pytest.mark.long
@pytest.mark.multiprocess
def test_a_run_into_closed_pipes_trains_to_the_end_and_exits_0(tmp_path):
    """Found by the thirty-ninth round: `pipeplan run … | true` exited 1 with no line after
    a run that had trained (rich's exit on EPIPE at the summary table), and with stderr a
    closed pipe too, rank 0 failed at its last flush. Both closed from the start: the run's
    files are complete and the status is 0. (Long: a real run; the tests above hold each
    part in seconds.)"""
    runs = tmp_path / "runs"
    args = ["run", "--nproc", "2", "--epochs", "1", "--max-steps-per-epoch", "2"]
    args += ["--name", "r", "--runs-dir", str(runs)]
    assert command(args, closed=("stdout", "stderr"), timeout=240) == (0, "", "")
    summary = json.loads((runs / "r" / "summary.json").read_text())
    assert summary["steps"] == 2 and (runs / "r" / "model").is_dir()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "variable, value, refused",
    [
        ("OMP_NUM_THREADS", "0", True),
        ("OMP_PROC_BIND", "bogus", True),
        ("GOMP_SPINCOUNT", "x", True),
        ("OMP_NUM_THREADS", "1", False),
        # The forty-ninth round: libgomp's parser never returned (deaf to Ctrl-C), and a
        # display of the settings (a value OpenMP takes) was refused.
        # In `-m long`, for the default run's 15 minutes (a probe that never ends, 10 s).
        pytest.param(
            "GOMP_CPU_AFFINITY",
            "abc",
            "never finished reading GOMP_CPU_AFFINITY='abc'",
            marks=pytest.mark.long,
        ),
        ("OMP_DISPLAY_ENV", "true", False),
        # The fifty-first round: parsed, but no thread can have it (libgomp's line, exit 1).
        ("OMP_STACKSIZE", "16000G", "libgomp: Thread creation failed"),
        ("OMP_STACKSIZE", "4M", False),
        ("OMP_DISPLAY_AFFINITY", "true", False),  # the probe's threads' lines: not a refusal
    ],
)
def test_an_openmp_variable_libgomp_refuses_is_one_error_line(
    tmp_path, monkeypatch, variable, value, refused
):
    """Found by the forty-seventh round: `OMP_NUM_THREADS=0 pipeplan export …` printed a blank
    line and "libgomp: Invalid value for environment variable OMP_NUM_THREADS" (libgomp's,
    as torch loaded it) before pipeplan's error line, and a run printed the pair once per
    process. torch's libgomp is loaded first with its stderr held (`cli`): its complaint is
    pipeplan's one error line, naming the variable; a value it takes changes nothing."""
    monkeypatch.setenv(variable, value)
    code, _, err = command(["export", str(tmp_path / "no-run"), "--out", str(tmp_path / "e")])
    lines = err.splitlines()
    if variable == "OMP_DISPLAY_ENV":  # the block asked for, then the command's own line
        assert lines[0] == "OPENMP DISPLAY ENVIRONMENT BEGIN" and "END" in lines[-2], lines
        lines = lines[-1:]
    assert code == 2 and len(lines) == 1, lines
    if isinstance(refused, str) and refused.startswith("libgomp"):
        assert lines[0].startswith(f"pipeplan: error: the environment: {refused}"), lines
    elif isinstance(refused, str):
        assert lines[0].startswith(
            f"pipeplan: error: the environment: torch's OpenMP library {refused}"
        )
    elif refused:
        assert lines[0].startswith(
            "pipeplan: error: the environment: libgomp: Invalid value for environment variable "
            f"{variable} (torch's OpenMP library)"
        ), lines
    else:
        assert "no-run" in lines[0] and "environment" not in lines[0], lines


PROFILE_ONE = ["profile", "bert-synth", "--repeats", "1", "--warmup", "0"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "variable, value, args, said",
    [
        ("TORCH_LOGS", "bogus", PROFILE_ONE, "importing torch failed (Invalid log settings: "),
        ("PYTORCH_JIT", "abc", PROFILE_ONE, "importing torch failed (Unknown setting of "),
        ("HF_HUB_ETAG_TIMEOUT", "abc", PROFILE_ONE, "importing huggingface_hub failed ("),
        ("MPLBACKEND", "bogus", [*PREVIEW, "--plot", "plots"], "importing matplotlib failed ("),
        ("TORCH_CPP_LOG_LEVEL", "bogus", ["models"], "TORCH_CPP_LOG_LEVEL='bogus' is no level"),
        ("TRANSFORMERS_VERBOSITY", "loud", ["models"], "TRANSFORMERS_VERBOSITY='loud' is no "),
        # the seventy-sixth round: torch.distributed's own line quoted only the value
        ("LOGLEVEL", "bogus", ["models"], "LOGLEVEL='bogus' is no level it takes (CRITICAL, "),
    ],
)
def test_a_librarys_variable_it_cannot_read_is_one_error_line(
    tmp_path, monkeypatch, variable, value, args, said
):
    """Found by the seventy-fourth round: a library's own variable it cannot read as it is
    imported (`TORCH_LOGS=bogus`, `PYTORCH_JIT=abc`, `MPLBACKEND=bogus`) was a Python
    traceback of 40 to 105 lines and exit 1, `HF_HUB_ETAG_TIMEOUT=abc` "bert-synth: cannot
    build the model from its config", and a log level torch's C++ side or transformers cannot
    read their own bare line before the command went on. One line, naming the variable, and
    exit 2; nothing written."""
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(tmp_path)
    code, _, err = command([*args, "--out", "p.json"] if args is PROFILE_ONE else args)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"pipeplan: error: the environment: {said}"), lines
    assert f"{variable}={value!r}" in lines[0] and list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "value, python_said",
    [
        ("bogus", "invalid action: 'bogus'"),
        ("default,ignore::NoSuchWarning", "unknown warning category: 'NoSuchWarning'"),
        ("ignore::x.Warning", "invalid module name: 'x'"),
        ("ignore:::m:-1", "invalid lineno -1"),
    ],
)
def test_a_warning_filter_python_ignores_is_refused(tmp_path, monkeypatch, value, python_said):
    """Found by the seventy-eighth round: `PYTHONWARNINGS=bogus` was Python's own line
    "Invalid -W option ignored: …" once in each process of a run (three for `--nproc 2`),
    and the run went on, exit 0. Python says it as the command's process starts, before any
    code of pipeplan's runs: that line, then pipeplan's one, naming the variable, exit 2;
    nothing started or written. Filters Python takes are not refused."""
    monkeypatch.setenv("PYTHONWARNINGS", value)
    monkeypatch.chdir(tmp_path)
    code, _, err = command(["models"])
    assert code == 2 and err.splitlines() == [
        f"Invalid -W option ignored: {python_said}",
        f"pipeplan: error: the environment: PYTHONWARNINGS={value!r} holds a filter Python "
        f"ignores ({python_said}); unset it or correct it",
    ], err[-3000:]
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::DeprecationWarning,default:::mod:+3,error")
    assert command(["models"])[0] == 0


@pytest.mark.timeout(120)
def test_the_environment_line_names_the_variable_at_fault_and_no_secret(tmp_path, monkeypatch):
    """Found by the seventy-fifth round: the line quoted every variable of the library's set,
    the first four: an `HF_TOKEN` printed whole (and written to a rank's log), and four
    harmless `HF_*` hid the one at fault. The one the error quotes is named with its value;
    a token's value never."""
    for name, value in (("HF_HOME", str(tmp_path)), ("HF_ENDPOINT", "https://hf.example")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_abc")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "abc")
    monkeypatch.chdir(tmp_path)
    code, _, err = command([*PROFILE_ONE, "--out", "p.json"])
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    assert "it reads HF_HUB_ETAG_TIMEOUT='abc': unset it" in err and "secret" not in err, err


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "variable, value", [("TORCH_LOGS", "bogus"), ("HF_HUB_ETAG_TIMEOUT", "abc")]
)
def test_a_torchrun_rank_whose_library_cannot_read_its_variable_says_one_line(
    tmp_path, capsys, variable, value
):
    """The seventy-fourth round's `TORCH_LOGS=bogus`, in a torchrun rank: torch's traceback
    as the rank imported it; the rank's one line and exit 2, before it reads its run. By the
    seventy-fifth, a variable read as the rank builds its model (`HF_HUB_ETAG_TIMEOUT=abc`,
    huggingface_hub's) was the one line but exit 1, a failure's code, not bad input's."""
    from pipeplan.fileio import release_directory
    from pipeplan.spawn import free_port

    run = tmp_path / "r"
    if variable != "TORCH_LOGS":  # read as the model is built: a run to build it for
        argv = ["run", "--model", "vit-digits", "--nproc", "1", "--epochs", "1", "--name", "r"]
        assert cli.main([*argv, "--runs-dir", str(tmp_path), "--prepare-only"]) == 0
        capsys.readouterr()
        release_directory(run)
    env = {k: v for k, v in os.environ.items() if k != "PIPEPLAN_LAUNCHER_PID"}
    env.update({variable: value, "PYTHONPATH": str(ROOT), "MASTER_PORT": str(free_port())})
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    env["MASTER_ADDR"] = "127.0.0.1"
    done = subprocess.run(
        [sys.executable, "-m", "executor.launch", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    library = "torch" if variable == "TORCH_LOGS" else "huggingface_hub"
    assert lines[0].startswith(
        f"pipeplan: error: rank 0: the environment: importing {library} failed ("
    ), lines
    assert lines[0].endswith(f"{variable}={value!r}: unset it or give it a value {library} takes")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "environment",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"},
    ],
    ids=["ascii", "C locale"],
)
@pytest.mark.parametrize("args", [["--help"], ["models"], [*PREVIEW, "--epochs", "2"]])
def test_a_console_without_the_tables_characters_shows_them_escaped(monkeypatch, environment, args):
    """Found by the forty-seventh round: under PYTHONIOENCODING=ascii or latin-1, or the C
    locale without UTF-8 mode, `models`, `preview`, `report`, `profile` and every `--help`
    failed in a traceback ("'ascii' codec can't encode character '\\xd7'"), exit 1, their
    output cut. A character the console cannot encode is escaped, as Python's stderr escapes
    it (`1.15\\xd7`): exit 0, the whole output, nothing on stderr."""
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    code, out, err = command(args)
    assert (code, err) == (0, ""), err
    if args[0] == "preview":
        assert "\\xd7" in out and "over the baseline" in out, out[-500:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "columns",
    [
        pytest.param(str(10**8), marks=pytest.mark.long),  # (as the 4,301 nines: too wide)
        pytest.param("0000000010000000", marks=pytest.mark.long),
        "١٠٠٠٠٠٠٠",
        "0",
        pytest.param("00", marks=pytest.mark.long),  # (as "0": too narrow)
        pytest.param("1", marks=pytest.mark.long),
        "9" * 4301,
    ],
)
@pytest.mark.parametrize("args", [["run", "--help"], ["models"]])
def test_a_columns_out_of_bounds_is_laid_out_as_the_nearest_bound(monkeypatch, args, columns):
    """Found by the forty-ninth round: rich pads each help line to COLUMNS: COLUMNS=10^7 took
    27 s and 1.5 GB, 10^8 ran past 2 minutes; by the fiftieth, leading zeros hid 10^7 from
    the bound, and COLUMNS=0 printed nothing at all, exit 0; by the fifty-first, more digits
    than int() reads (4,300) were a traceback as cli.py loaded. A COLUMNS beyond
    `log.MAX_COLUMNS` (or below `log.MIN_COLUMNS`) is read as that bound."""
    from pipeplan import log

    monkeypatch.setenv("COLUMNS", columns)
    code, out, err = command(args, timeout=60)
    assert code == 0 and err == ""
    assert max(len(line) for line in out.splitlines()) <= log.MAX_COLUMNS
    assert 1000 < len(out) < 200_000, len(out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lines", ["9" * 4301, "0", "10000000"])
def test_a_lines_of_any_size_is_read_within_bounds(monkeypatch, lines):
    """Found by the fifty-first round: LINES of more than 4,300 digits was a traceback from
    rich (int()) as cli.py loaded, every command, exit 1."""
    monkeypatch.setenv("LINES", lines)
    code, out, err = command(["models"], timeout=60)
    assert (code, err) == (0, "") and "bert-tiny" in out


@pytest.mark.timeout(120)
def test_a_prepared_run_whose_command_cannot_be_said_is_not_kept(tmp_path):
    """Found by the forty-ninth round: `run --prepare-only > /dev/full` failed (exit 2) but
    kept the prepared folder, which then blocked its name ("already holds a run"); the
    torchrun command it was for was never seen. It is removed; a closed pipe (a reader that
    wanted no more) keeps it."""
    runs = tmp_path / "runs" / "a"  # and the folders it made for the run (fifty-first round)
    argv = ["run", "--prepare-only", "--epochs", "1", "--runs-dir", str(runs), "--name", "p"]
    code, _, err = command(argv, shell=">/dev/full")
    assert code == 2 and err == (
        "pipeplan: error: could not write the output to standard output: No space left on "
        f"device; the run prepared for torchrun, {runs / 'p'}, is removed\n"
    )
    assert list(tmp_path.iterdir()) == []
    code, _, err = command(argv, closed=("stdout",))
    assert (code, err) == (0, "") and (runs / "p" / "run.json").is_file()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit, said", [(0, "the file size limit (ulimit -f) is 0 bytes")])
def test_no_temporary_file_under_a_zero_file_size_limit_is_named(tmp_path, limit, said):
    """Found by the fifty-eighth round: under `ulimit -f 0` `profile` said "vit-digits: cannot
    build the model from its config ([Errno 2] No usable temporary directory found in […])"
    (tempfile writes a few bytes in each folder it tries), and run and export listed every
    folder, each writable. The limit is named, in one line."""
    argv = [sys.executable, str(ROOT / "cli.py"), "profile", "vit-digits"]
    argv += ["--out", str(tmp_path / "p.json"), "--micro-batch-sizes", "1", "--repeats", "1"]
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=100,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        preexec_fn=lambda: _under_file_size_limit(limit),
    )  # fmt: skip
    assert done.returncode == 2
    # Where its imports ask tempfile first, the temporary file's line; where the profile gets
    # as far as its output (another environment's imports), that write's: the limit named.
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan: error: "), lines
    assert said in lines[0] or "the file size limit, ulimit -f, is 0 bytes" in lines[0], lines
    assert "cannot build the model" not in lines[0]


def test_tempfile_s_failure_names_the_file_size_limit_or_the_folders(monkeypatch):
    """`errors.tempdir_failure`, the line the test above gets where its imports ask tempfile:
    under a zero `ulimit -f` the limit; else the folders tempfile tried, and TMPDIR."""
    import resource

    from pipeplan.errors import tempdir_failure

    failed = FileNotFoundError(2, "No usable temporary directory found in ['/tmp', '/var/tmp']")
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (0, hard))
    assert "the file size limit (ulimit -f) is 0 bytes" in str(tempdir_failure(failed))
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, hard))
    monkeypatch.setenv("TMPDIR", "/nowhere")
    said = str(tempdir_failure(failed))
    assert said.startswith("no temporary file can be written in TMPDIR ('/nowhere'), /tmp")
    assert tempdir_failure(FileNotFoundError(2, "No such file")) is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--profile", PROFILE, "--out", "p.json"],  # relative: into the removed one
        ["run", "--nproc", "1", "--name", "r", "--runs-dir", "{tmp}/runs"],
    ],
    ids=["plan", "run"],
)
def test_a_working_directory_removed_as_the_command_runs_is_one_line(tmp_path, args):
    """Found by the seventy-ninth round: the working directory removed as `pipeplan run`
    checked its data (after the command's own check of it) printed 131 lines of chained
    tracebacks, exit 1: torch._dynamo's `os.getcwd()` as it was imported, then
    `import_failure`'s realpath of `<frozen importlib._bootstrap>`. Removed here once the
    command's check has passed (its first import of torch): one line naming it, exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = removed_after_its_check(gone, "import os, sys, torch.nn")
    said_as_removed(gone, code, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert not (tmp_path / "runs").exists()


def removed_after_its_check(gone: Path, imports: str = "import os, sys") -> str:
    """The code of a command run by `python -c` that removes `gone` once the command's own
    check of its working directory has passed, after `imports`."""
    return (
        f"{imports}\n"
        "import cli\n"
        "real = cli._check_working_directory\n"
        f"def removed(): real(); os.rmdir({str(gone)!r})\n"
        "cli._check_working_directory = removed\n"
        "sys.argv = ['pipeplan', *sys.argv[1:]]\n"
        "cli.entry()\n"
    )


def said_as_removed(gone: Path, code: str, args: list[str]) -> None:
    """`python -c code ARGS` run in `gone`, which the code removes as the command runs: exit
    2 and the one line naming it, nothing else on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=gone, env=env, capture_output=True, text=True,
        timeout=100,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"pipeplan: error: the working directory was removed ({gone}): run pipeplan from a "
        "folder that exists"
    ], done.stderr[-3000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "export"])
def test_a_working_directory_removed_as_torch_loads_is_one_line(tmp_path, command):
    """Found by the eightieth round: removed once the command's check had passed and before
    torch had loaded (a second or more under load), torch's oneMKL ended the command with
    its own "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so" and no line of ours.
    torch loads away from it (`startup.away_from_working_directory`): the one line, exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = removed_after_its_check(gone)
    args = {
        "run": ["run", "--nproc", "1", "--name", "r", "--runs-dir", str(tmp_path / "runs")],
        "export": ["export", str(tmp_path / "runs" / "r"), "--out", str(tmp_path / "m")],
    }[command]
    said_as_removed(gone, code, args)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "m").exists()


@pytest.mark.timeout(120)
def test_a_run_its_removed_working_directory_failed_before_a_step_is_undone(tmp_path):
    """Found by the eightieth round: the working directory removed as the ranks started
    failed them before their first step (their imports read it), and the run's folder stayed:
    the same command was then refused ("already holds a run"). Ended so, a run that trained
    nothing is undone, as one a stop ends, and the line is the removal's alone."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys\n"
        "import cli\n"
        "from executor import launch\n"
        "from pipeplan.spawn import RankFailedError\n"
        "def failed(cfg, run_dir, resume=False):\n"
        f"    os.rmdir({str(gone)!r})\n"
        "    raise RankFailedError('training failed on rank 0 before the first step: exited "
        "with code 1', 0)\n"
        "launch.run_local = failed\n"
        "sys.argv = ['pipeplan', *sys.argv[1:]]\n"
        "cli.entry()\n"
    )
    args = ["run", "--nproc", "1", "--name", "r", "--runs-dir", str(tmp_path / "runs")]
    said_as_removed(gone, code, args)
    assert not (tmp_path / "runs").exists()


def test_a_removed_working_directory_is_no_folder_to_find_data_in(tmp_path, monkeypatch):
    """The eightieth round: a rank of built-in data (`--data digits`) whose working directory
    was removed before its first step failed as it put that folder on sys.path (FileNotFound
    from `Path.cwd()`), though nothing of it was needed. Nothing is added; data of a module
    in it is then not found, said as that."""
    from executor.data import _append_data_directory

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    before = list(sys.path)
    assert _append_data_directory() is None
    assert sys.path == before


def test_import_failure_with_the_working_directory_gone_names_it(tmp_path, monkeypatch):
    """The same round: `import_failure` took realpath() of every frame's file name, and
    `<frozen importlib._bootstrap>` is none: with the directory gone it raised, its own
    FileNotFoundError chained over the import's."""
    from pipeplan.errors import import_failure

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    try:
        exec(
            compile("raise FileNotFoundError(2, 'No such file or directory')", "<frozen x>", "exec")
        )
    except FileNotFoundError as exc:
        said = str(import_failure(exc))
    assert (
        said
        == f"the working directory was removed ({gone}): run pipeplan from a folder that exists"
    )
