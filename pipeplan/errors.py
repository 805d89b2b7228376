"""Errors a user can act on.

The library raises these; the CLI prints the message as one line and exits with code 2.
Anything else escaping the library is a bug and keeps its traceback.
"""


class PipeplanError(Exception):
    """Base class: the message is the whole story, written for the user."""


class UnknownModelError(PipeplanError):
    pass


class InputFileError(PipeplanError):
    """A file the user gave is missing, unreadable, malformed or of the wrong kind."""


class BadArgumentError(PipeplanError):
    pass


class OutputError(PipeplanError):
    """An output path cannot be written."""


class Interrupted(BaseException):
    """Ctrl-C. The CLI prints `pipeplan: interrupted` and exits 130. Not a KeyboardInterrupt:
    typer turns that into exit code 130 silently, before the CLI could say anything."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP (a scheduler's stop, `kill`, a closed terminal) to pipeplan, or to
    the launcher of a run's ranks. The CLI prints `pipeplan: stopped by SIGTERM` and exits
    128 + the signal's number, as a process the signal killed would.

        raise Stopped(signal.SIGTERM)
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
