"""One logging set-up for the `pipeplan` command and every rank of a run.

    from pipeplan import log
    log.setup()                  # the CLI:  "pipeplan: WARNING: --nproc 9 is more than …"
    log.setup(rank=1)            # a rank:   "pipeplan: rank 1: WARNING: AutoCache off: …"
    log.setup(debug=True)        # DEBUG instead of INFO
    log.setup(rank=1, stream=f)  # to `f`, not stderr: a rank whose stderr goes to its log file

Modules log to loggers under "pipeplan." (`logging.getLogger("pipeplan.run")`); nothing else
configures logging.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import TextIO

from pipeplan.errors import fitted

LOGGER = "pipeplan"
# The longest message pipeplan prints on one line (an error's or a warning's), in characters:
# room for three paths of PATH_MAX (4,096 bytes) and as much again of words. Messages quote a
# value at most `errors.SHOWN` characters long; this bound holds for any message besides (a
# config's 10 MB hidden_act was a 10 MB error line in the twentieth round): a longer one keeps
# its start, which names the file and the field, and says how long it was.
MAX_LINE = 16_384


def bounded(message: str, prefix: str = "") -> str:
    """`bounded("p.json: field 'x': …", "pipeplan: error: ")` → the line `prefix + message`,
    unchanged up to MAX_LINE characters, else the message cut visibly, `… (N characters)`
    (N: the message's length), so that the whole line, prefix and cut included, is
    MAX_LINE characters. The bound is the line's as printed: counting the message alone,
    a cut line was 16,424 characters (twenty-third round)."""
    return prefix + fitted(message, MAX_LINE - len(prefix))


ERROR_PREFIX = "pipeplan: error: "


def error_line(message: object) -> str:
    """`error_line(exc)` → "pipeplan: error: p.json: …", bounded: the line `error` prints,
    for a caller that prints it elsewhere (a rank's failure in the launcher)."""
    return bounded(str(message), ERROR_PREFIX)


def error(message: object, stream: TextIO | None = None) -> None:
    """The one way pipeplan prints an error: `pipeplan: error: MESSAGE` on one bounded line,
    to `stream` (default: whatever `sys.stderr` is now).

        log.error(exc)   # pipeplan: error: p.json: invalid profile: field 'layers.3': …
    """
    write_line(error_line(message), stream)


def write_line(line: str, stream: TextIO | None = None) -> None:
    """`write_line("pipeplan: rank 1: interrupted")`: one write of the line and its end, to
    `stream` (default: whatever `sys.stderr` is now). `print` writes the text and the line
    feed apart: two torchrun ranks failing at once on one console merged their lines into
    one (the thirty-second round)."""
    stream = stream or sys.stderr
    stream.write(line + "\n")
    stream.flush()


class _Bounded(logging.Formatter):
    """pipeplan's warnings and notices, each bounded as an error is (`bounded`): the record's
    line, not a traceback `--debug` adds below it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)  # the format ends with the message
        prefix = line[: len(line) - len(record.message)]
        return bounded(line[len(prefix) :], prefix)


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes: rich's live progress bar and
    pytest swap it, and a stream fixed at set-up time would bypass or outlive them. Unless
    given a stream of its own (`fixed`)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)
        self.fixed = None

    @property
    def stream(self):  # type: ignore[override]
        return self.fixed or sys.stderr


class FileHandler(logging.FileHandler):
    """A log file that fails in silence: a write that fails (a full disk) is kept in `failure`
    for the caller to report in its own words, never printed. logging's own handler printed
    `--- Logging error ---` and a 100-line traceback to stderr for each record, and its
    `close` raised the failed flush's OSError over whatever the caller was reporting.
    Opened to append, as a regular file only (`fileio.open_append`: a link there was
    followed, a FIFO hung `run --resume`): OutputError naming it otherwise.

        handler = log.FileHandler(logs / "launcher.log")
        ...
        handler.close()
        if handler.failure is not None: ...   # the OSError of the first failed write
    """

    def __init__(self, filename, encoding: str | None = None) -> None:
        self.failure: BaseException | None = None
        self.given = filename  # as given, for a refusal's message (logging keeps it absolute)
        super().__init__(filename, "a", encoding, delay=False)

    def _open(self):
        from pipeplan.fileio import open_append  # here: pipeplan.log is imported first of all

        return os.fdopen(open_append(self.given), "a", encoding=self.encoding)

    def handleError(self, record: logging.LogRecord) -> None:
        self.failure = self.failure or sys.exc_info()[1]

    def close(self) -> None:
        try:
            super().close()  # flushes what is buffered: on a full disk it fails here too
        except OSError as exc:
            self.failure = self.failure or exc
            with contextlib.suppress(OSError):
                if self.stream is not None:
                    self.stream.close()
            self.stream = None


def setup(rank: int | None = None, debug: bool = False, stream=None) -> logging.Logger:
    """Configure the "pipeplan" logger; calling it again only updates the format, level and
    stream (None: whatever `sys.stderr` is)."""
    logger = logging.getLogger(LOGGER)
    handler = next((h for h in logger.handlers if isinstance(h, _Stderr)), None)
    if handler is None:
        handler = _Stderr()
        logger.addHandler(handler)
    where = "" if rank is None else f"rank {rank}: "
    handler.fixed = stream
    handler.setFormatter(_Bounded(f"pipeplan: {where}%(levelname)s: %(message)s"))
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    return logger


def configured() -> bool:
    """Whether the `pipeplan` logger has a handler (set up here or by the caller)."""
    return bool(logging.getLogger(LOGGER).handlers)


class _Held(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """What "pipeplan" loggers say inside is shown only once the block succeeds: a command
    refused in one line must not print a warning first (a checkpoint's head replaced, then a
    global batch larger than the data).

        with log.held():
            planner, facts = check_run(cfg)   # its warnings come out after it passes
    """
    logger = logging.getLogger(LOGGER)
    hold, saved = _Held(), logger.handlers[:]
    logger.handlers = [hold]
    try:
        yield
    finally:
        logger.handlers = saved
    for record in hold.records:  # reached only when the block did not raise
        logger.handle(record)
