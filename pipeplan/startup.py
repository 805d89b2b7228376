"""Signals while the `pipeplan` command is still starting (imports take seconds under load):
Ctrl-C there was a KeyboardInterrupt traceback from inside an import, SIGTERM a silent exit.
Imported first of pipeplan's modules by `cli.py`; in the command's own process (not when a
program or a test imports `cli`) it ends the process with the line the command prints once it
runs, until `cli.main` installs its handlers. Nothing has been written by then.

    import pipeplan.startup  # noqa: F401  (cli.py: its import is the work)
"""

import os
import signal
import sys

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stopped_by(signum: int) -> str:
    """`stopped_by(15)` → "stopped by SIGTERM": what pipeplan says of a signal that ends it."""
    return f"stopped by {signal.Signals(signum).name}"


def _end(signum: int, frame: object) -> None:
    said = "interrupted" if signum == signal.SIGINT else stopped_by(signum)
    os.write(2, f"pipeplan: {said}\n".encode())
    os._exit(128 + signum)  # mid-import: nothing to unwind or flush


def is_the_command() -> bool:
    """Whether this process is `pipeplan …` (the console script) or `python -m cli …`."""
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("pipeplan", "cli.py")


if is_the_command():
    for _signal in SIGNALS:
        signal.signal(_signal, _end)
