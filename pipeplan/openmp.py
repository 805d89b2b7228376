"""torch's OpenMP library (libgomp) reads the OMP_*/GOMP_* variables as it loads, and some
values it refuses with its own two lines on the console, or never finishes reading. It is
loaded first in a bounded child (`check_openmp_environment`): by the `pipeplan` command before
any command runs, and by a torchrun rank before its imports (`executor.launch`). Standard
library only: it runs before torch loads.

    check_openmp_environment()   # OMP_NUM_THREADS=0 → BadArgumentError("the environment: …")
"""

import contextlib
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

from pipeplan.errors import BadArgumentError, quoted


def check_openmp_environment() -> None:
    """An OpenMP variable libgomp refuses (`OMP_NUM_THREADS=0`, `OMP_PROC_BIND=bogus`) is one
    error line, not libgomp's own two lines on the console as torch loads it (in the
    launcher and in every rank), before pipeplan's (forty-seventh round). torch's libgomp is
    first loaded in a child process, bounded by OPENMP_PROBE_S: libgomp's parser never
    returns from some values (`GOMP_CPU_AFFINITY=abc` spun at 100 % CPU, deaf to Ctrl-C:
    forty-ninth round). Where the child said nothing, it is loaded here, its descriptor 2
    held: torch then finds it loaded, and it says nothing again. `OMP_DISPLAY_ENV`'s block is
    what the user asked for, not a refusal: passed on. Nothing is loaded where no such
    variable is set, or where torch brings no libgomp of its own."""
    named = sorted(key for key in os.environ if key.startswith(("OMP_", "GOMP_")))
    if not named:
        return
    spec = importlib.util.find_spec("torch")
    folders = spec.submodule_search_locations if spec else None
    found = sorted(Path(folders[0], "lib").glob("libgomp*.so*")) if folders else []
    if not found:
        return
    # Loaded, then two threads started: a stack size libgomp parses but cannot give
    # (`OMP_STACKSIZE=16000G`) fails only there, in libgomp's own line and exit 1 (the
    # fifty-first round: `profile --threads 2`).
    load = (
        "import ctypes, sys\ntry: lib = ctypes.CDLL(sys.argv[1])\nexcept OSError: sys.exit()\n"
        "lib.GOMP_parallel(ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: None), None, 2, 0)"
    )
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", "-c", load, str(found[0])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=OPENMP_PROBE_S,
        )
    except subprocess.TimeoutExpired:
        values = ", ".join(f"{key}={quoted(os.environ[key], 60)}" for key in named)
        raise BadArgumentError(
            f"the environment: torch's OpenMP library never finished reading {values} "
            f"(waited {OPENMP_PROBE_S:g} s); unset the variable or give it a value OpenMP takes"
        ) from None
    text = probe.stderr[:4096].decode(errors="replace")
    shown, lines = _display_block(text)
    if probe.returncode != 0 and not lines:  # ended without a word of libgomp's
        last = [line.strip() for line in text.splitlines() if line.strip()][-1:]
        code = probe.returncode
        ended = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        lines = last or [f"loading it ended the process ({ended})"]
    if lines:
        raise BadArgumentError(
            f"the environment: {'; '.join(lines)} (torch's OpenMP library); unset the "
            "variable or give it a value OpenMP takes"
        )
    kept, quiet = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(quiet, 2)
        with contextlib.suppress(OSError):
            ctypes.CDLL(str(found[0]))
    finally:
        os.dup2(kept, 2)
        os.close(kept)
        os.close(quiet)
    if shown:
        sys.stderr.write(shown)


# Seconds torch's OpenMP library is given to read the environment (it loads in milliseconds).
OPENMP_PROBE_S = 10.0


def _display_block(text: str) -> tuple[str, list[str]]:
    """What libgomp wrote as it loaded, split into the block `OMP_DISPLAY_ENV` asks for
    (passed on as written) and its own messages (a refusal: each begins `libgomp:`),
    stripped. Other lines are the probe's threads' (`OMP_DISPLAY_AFFINITY`), not passed on:
    the command's own threads say theirs."""
    shown, lines, inside = [], [], False
    for line in text.splitlines(keepends=True):
        if "OPENMP DISPLAY ENVIRONMENT BEGIN" in line:
            inside = True
        if inside:
            shown.append(line)
        elif line.strip().startswith("libgomp:"):
            lines.append(line.strip())
        if "OPENMP DISPLAY ENVIRONMENT END" in line:
            inside = False
    return "".join(shown), lines
