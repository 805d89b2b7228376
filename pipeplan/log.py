"""One logging set-up for the `pipeplan` command and every rank of a run.

    from pipeplan import log
    log.setup()                  # the CLI:  "pipeplan: WARNING: --nproc 9 is more than …"
    log.setup(rank=1)            # a rank:   "pipeplan: rank 1: WARNING: AutoCache off: …"
    log.setup(debug=True)        # DEBUG instead of INFO

Modules log to loggers under "pipeplan." (`logging.getLogger("pipeplan.run")`); nothing else
configures logging.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "pipeplan"


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes: rich's live progress bar and
    pytest swap it, and a stream fixed at set-up time would bypass or outlive them."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def setup(rank: int | None = None, debug: bool = False) -> logging.Logger:
    """Configure the "pipeplan" logger; calling it again only updates the format and level."""
    logger = logging.getLogger(LOGGER)
    handler = next((h for h in logger.handlers if isinstance(h, _Stderr)), None)
    if handler is None:
        handler = _Stderr()
        logger.addHandler(handler)
    where = "" if rank is None else f"rank {rank}: "
    handler.setFormatter(logging.Formatter(f"pipeplan: {where}%(levelname)s: %(message)s"))
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    return logger


def configured() -> bool:
    """Whether the "pipeplan" logger has a handler already (set up here, or by the caller of
    the Python API, whose set-up is then left alone)."""
    return bool(logging.getLogger(LOGGER).handlers)
