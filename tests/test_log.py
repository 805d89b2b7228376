"""One logging set-up: the command's messages say `pipeplan:`, a rank's say which rank."""

import logging
import re
import sys
from pathlib import Path

import pytest

from executor.launch import rank_console
from pipeplan import log
from pipeplan.errors import PipeplanError
from pipeplan.spawn import run_ranks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pipeplan_logger():
    """The "pipeplan" logger, put back as it was afterwards (setup changes it process-wide)."""
    logger = logging.getLogger("pipeplan")
    handlers, level = list(logger.handlers), logger.level
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_setup_twice_keeps_one_handler_and_takes_the_last_format_and_level(pipeplan_logger, capsys):
    log.setup(rank=3, debug=True)
    assert pipeplan_logger.level == logging.DEBUG
    log.setup()
    assert len(pipeplan_logger.handlers) == 1 and pipeplan_logger.level == logging.INFO
    logging.getLogger("pipeplan.run").info("hello")
    logging.getLogger("pipeplan.run").debug("not shown")
    assert capsys.readouterr().err == "pipeplan: INFO: hello\n"


def test_every_logger_is_under_the_pipeplan_namespace():
    """setup() configures "pipeplan" only; a logger outside it would bypass the format."""
    sources = [ROOT / "cli.py", *ROOT.glob("pipeplan/*.py"), *ROOT.glob("executor/*.py")]
    names = [
        name
        for path in sources
        for name in re.findall(r"getLogger\(([^)]*)\)", path.read_text())
        if path.name != "log.py"
    ]
    # torch's own loggers are named only to quiet them (`spawn.run_ranks`) or to listen to
    # them (`faults.AgentStops`), never to log.
    torchs = ('"torch.', "AGENT_LOGGER")
    names = [n for n in names if not n.startswith(torchs)]
    assert names and all(re.fullmatch(r'"pipeplan\.[a-z]+"', n) for n in names), names


def test_the_commands_own_warnings_use_the_command_format(tmp_path):
    """`prepare` warns that a checkpoint without a classifier head gets a fresh one: in the
    command's format when the run passes its checks; held back when a check then refuses it
    (one line, the error's: a missing profile)."""
    import transformers

    config = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
    transformers.BertModel(transformers.BertConfig(**config, intermediate_size=64)).save_pretrained(
        tmp_path / "bert"
    )
    from test_cli import run_cli as pipeplan  # the entry point in a fresh process

    model = str(tmp_path / "bert")
    args = ["run", "--model", model, "--data", "synth-text", "--nproc", "1", "--prepare-only"]
    args += ["--runs-dir", str(tmp_path / "runs")]
    done = pipeplan(*args)
    assert done.returncode == 2
    (error,) = done.stderr.splitlines()
    assert error.startswith("pipeplan: error: no shipped profile for"), error
    profile = str(tmp_path / "bert.json")
    measure = ["--micro-batch-sizes", "1,2,4,8", "--repeats", "1", "--warmup", "0"]
    import cli  # the profile is the run's input, not what is checked: made in this process

    assert cli.main(["profile", model, "--out", profile, *measure]) == 0
    done = pipeplan(*args, "--profile", profile, "--global-batch", "8")
    assert done.returncode == 0, done.stderr
    warning = done.stderr.splitlines()[0]
    assert re.fullmatch(r"pipeplan: WARNING: \S+/bert: the checkpoint has no head .*", warning)


def _rank_warns(rank: int, log_dir: str) -> None:
    """A rank set up as `pipeplan run` sets it up (its output to its log file, pipeplan's lines
    to the console); both print noise, then rank 1 warns."""
    log.setup(rank=rank, stream=rank_console(Path(log_dir), rank))
    print("torch noise", file=sys.stderr, flush=True)
    if rank == 1:
        logging.getLogger("pipeplan.run").warning("something to see")


@pytest.mark.multiprocess
def test_a_spawned_ranks_warning_reaches_the_parents_stderr_with_its_rank(tmp_path, capfd):
    run_ranks(_rank_warns, 2, (str(tmp_path / "logs"),), 120, "logging test ranks")
    err = capfd.readouterr().err
    assert "pipeplan: rank 1: WARNING: something to see\n" in err
    assert "rank 0" not in err
    assert "torch noise" not in err  # the rank's own output went to its log file
    assert "torch noise" in (tmp_path / "logs" / "rank-1.log").read_text()


def test_a_log_file_on_a_full_disk_fails_in_silence(tmp_path, capfd):
    """Found by the seventeenth round: logging's FileHandler on a full disk printed `--- Logging
    error ---` and a traceback to stderr for each record, and its close raised the OSError.
    pipeplan's keeps the first failure for its caller to word, and prints nothing."""
    handler = log.FileHandler(tmp_path / "launcher.log")
    handler.setStream(open("/dev/full", "a")).close()  # noqa: SIM115 (every write: ENOSPC)
    logger = logging.getLogger("test.full_disk")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("failed (exitcode: %s)", 1)
        logger.error("again")
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert isinstance(handler.failure, OSError) and handler.failure.strerror is not None
    assert capfd.readouterr().err == ""


# A message longer than any line pipeplan prints: the file and field first, then 10 MB.
# Words, not one: a word longer than any path is cut on its own (`log.bounded`).
HUGE = "p.json: field 'model.name': is " + "x " * (5 * 10**6)


def _bounded_line(err: str, start: str) -> str:
    """The one line of `err`, checked bounded as printed (prefix and cut included): its
    start kept, the cut said."""
    (line,) = err.splitlines()
    assert len(line) == log.MAX_LINE, len(line)
    assert start in line and line.endswith(" characters)"), line[-80:]
    return line


def test_an_error_line_is_bounded_whatever_its_message(monkeypatch, capsys):
    """Found by the twentieth round: an error line echoed a value of any length (a 10 MB
    hidden_act gave a 10 MB line). Whatever a message holds, the CLI prints at most
    MAX_LINE characters of it, keeping its start (the file and the field), and says so."""
    import cli
    from pipeplan.errors import InputFileError

    def refuse(args: list[str]) -> None:
        raise InputFileError(HUGE)

    monkeypatch.setattr(cli, "_check_version", refuse)
    assert cli.main(["schema", "profile"]) == 2
    line = _bounded_line(capsys.readouterr().err, "pipeplan: error: p.json: field 'model.name'")
    assert line.endswith(f"… ({len(HUGE)} characters)")


def test_a_line_is_bounded_with_its_prefix_and_its_cut(pipeplan_logger, capsys):
    """Found by the twenty-third round: a cut error line was 16,424 characters, over the
    16,384 the README states: the bound counted the message, not the `pipeplan: error: `
    before it nor the `… (N characters)` after the cut. Now the line as printed is bounded,
    a rank's warning (the longer prefix) too; a line of exactly MAX_LINE is not cut."""
    message = "x " * 50_000
    log.error(message)
    line = _bounded_line(capsys.readouterr().err, "pipeplan: error: x x")
    assert line.endswith("… (100000 characters)"), line[-40:]
    log.setup(rank=12)
    logging.getLogger("pipeplan.run").warning("%s", message)
    _bounded_line(capsys.readouterr().err, "pipeplan: rank 12: WARNING: x x")
    exact = ("y " * log.MAX_LINE)[: log.MAX_LINE - len("pipeplan: error: ")]
    log.error(exact)
    assert capsys.readouterr().err == f"pipeplan: error: {exact}\n"
    assert log.error_line(message) == log.bounded(message, "pipeplan: error: ")


def test_a_warning_line_is_bounded_whatever_its_message(pipeplan_logger, capsys):
    """Found by the twentieth round (with the error line): a warning pipeplan prints is
    bounded as an error is; a short one is unchanged."""
    log.setup()
    logging.getLogger("pipeplan.run").warning("%s", HUGE)
    _bounded_line(capsys.readouterr().err, "pipeplan: WARNING: p.json: field 'model.name'")
    logging.getLogger("pipeplan.run").warning("short")
    assert capsys.readouterr().err == "pipeplan: WARNING: short\n"


@pytest.mark.parametrize(
    "call, shown",
    [
        (("step-6",), "'step-6'"),
        (("/tmp/run/checkpoints/step-6", 8), "'/tmp/run'… (27 characters)"),
        (("a\nb" * 100, 4), "'a\\nba'… (300 characters)"),
        ((list(range(1000)), 12), "[0, 1, 2, 3,… (4890 characters)"),
        (([0, 5],), "[0, 5]"),
    ],
)
def test_a_quoted_value_is_whole_or_visibly_cut(call, shown):
    """Found by the twentieth round: messages quoted a value's first 40 (or 60, 120, 200)
    characters with no sign of the cut: `checkpoints/latest` holding
    '/tmp/…/checkpoints/step-6' was said to hold '/tmp/…/checkpoints'. One helper cuts now,
    outside the quotes, with the whole's length."""
    from pipeplan.errors import excerpt, quoted

    assert quoted(*call) == shown
    assert excerpt("x" * 500, 8) == "xxxxxxxx… (500 characters)"
    assert excerpt("short", 8) == "short"


def _exited(message: str) -> None:
    from executor.data import _contained

    with _contained("m:load", "function"):
        sys.exit(message)


def _refusal(call, *args) -> str:
    """The message `call(*args)` raises (a ValueError or one of pipeplan's errors)."""
    with pytest.raises((ValueError, PipeplanError)) as caught:
        call(*args)
    return str(caught.value)


def test_the_messages_that_quoted_a_cut_text_say_so():
    """Found by the twentieth round: besides `checkpoints/latest`, these quoted the first
    characters of a user's text silently: a created_at (40), an argument (60), a data
    function's last stderr line (200), a label's digits (20, with an ellipsis even when
    nothing was cut)."""
    import cli
    from executor.text import _label
    from pipeplan.formats import RunConfig
    from pipeplan.formats.base import iso_timestamp
    from pipeplan.options import build

    said = _refusal(iso_timestamp, "y" * 100)
    assert said.startswith(f"{'y' * 80!r}… (100 characters) is not an ISO 8601"), said
    said = cli._flag_of(["x" * 100], 0)
    assert said == f"the argument {'x' * 60!r}… (100 characters)"
    said = _refusal(_exited, "z" * 300)
    assert said.endswith(f"its last line on stderr: {'z' * 200!r}… (300 characters)"), said
    said = _refusal(_label, "1" * 30, "d.csv:3", True)
    assert said == f"d.csv:3: label {'1' * 20}… (30 characters) is beyond the limit of 1000000"
    said = _refusal(_label, "1" * 10, "d.csv:3", True)
    assert said == "d.csv:3: label 1111111111 is beyond the limit of 1000000"
    # A flag's value outside its choices was quoted whole (an argument may be 128 KiB).
    said = _refusal(build, RunConfig, {"precision": "q" * 500})
    assert said == f"--precision: must be fp32 or bf16, not {'q' * 200!r}… (500 characters)"


def test_an_error_line_is_one_write_so_ranks_sharing_a_console_do_not_merge_lines():
    """Found by the thirty-second round: two torchrun ranks failing at once printed "…
    --resumepipeplan: error: rank 1: …" and a blank line: `print` writes the text and its
    line feed apart, and the other rank's text came between. Each line is one write."""
    import io

    class Writes(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return super().write(text)

    stream = Writes()
    log.error("rank 0: runs/k: moved", stream)
    log.write_line("pipeplan: rank 1: interrupted", stream)
    assert stream.calls == [
        "pipeplan: error: rank 0: runs/k: moved\n",
        "pipeplan: rank 1: interrupted\n",
    ]


def test_a_word_longer_than_any_path_is_cut_with_its_colon_kept():
    """Found by the forty-ninth round: a path of 500 short folders (4,500 characters, longer
    than PATH_MAX) was printed whole in a 4,500-character error line. A word longer than
    any path the system takes keeps its first characters and says its length; a real path
    (up to 4,096) is printed whole."""
    from pipeplan.log import bounded

    long = "d/" * 2500
    line = bounded(f"{long}p.json: cannot write (File name too long)", "pipeplan: error: ")
    assert line.endswith("… (5006 characters): cannot write (File name too long)"), line
    assert line.startswith("pipeplan: error: d/d/") and len(line) < 300
    path = "d/" * 2047 + "dd"  # 4,096 characters
    assert bounded(f"{path}: no such file") == f"{path}: no such file"
