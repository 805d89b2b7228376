"""Faults the tests bring into a rank of `pipeplan run` from outside its data code: Python
imports this `sitecustomize` as it starts where this folder is on PYTHONPATH (each rank is
`python -P -m executor.launch`, on pipeplan's root and its launcher's PYTHONPATH), and it acts
only in the rank PIPEPLAN_TEST_FAULT's fault is for (RANK set). It wraps one function of
pipeplan's as its module is first imported (a finder ahead on `sys.meta_path`), before the rank
holds pipeplan's modules (`data.functions_kept` around its data code, `data.rank_held` from its
start), which then hold the wrapped one as the rank's own: a data module's `load` that replaced
it is refused ("the data function replaced …"). Nothing is imported here at start-up: a rank's
first statements (its signals, its parent-death signal) come before the imports that take
seconds.

    PYTHONPATH=tests/faultsite PIPEPLAN_TEST_FAULT=pause_in_checkpoint \
        PIPEPLAN_TEST_PAUSED=/tmp/paused pipeplan run ...
"""

import os
import sys


def _touch_paused() -> None:
    open(os.environ["PIPEPLAN_TEST_PAUSED"], "a").close()


def _stop() -> None:
    """This process stopped (SIGSTOP), PIPEPLAN_TEST_PAUSED touched first."""
    import signal

    _touch_paused()
    os.kill(os.getpid(), signal.SIGSTOP)


def _pausing_sha256(real):
    """Pauses inside rank 0's first checkpoint write, once model.pt is in the temporary folder
    (`.tmp-step-N/`): touches PIPEPLAN_TEST_PAUSED and sleeps for an hour in Python, where a
    signal's handler runs, as it would between torch.save's records."""

    def pausing_sha256(path):
        if ".tmp-step-" in str(path):
            import time

            _touch_paused()
            for _ in range(36000):
                time.sleep(0.1)
        return real(path)

    return pausing_sha256


def _stopping_after(real):
    """Stops the rank (SIGSTOP) once `real` returned, touching PIPEPLAN_TEST_PAUSED first."""

    def stopping_after(*args, **kwargs):
        done = real(*args, **kwargs)
        _stop()
        return done

    return stopping_after


def _stopping_before(real):
    """Stops the rank (SIGSTOP) as `real` is called, touching PIPEPLAN_TEST_PAUSED first."""

    def stopping_before(*args, **kwargs):
        _stop()
        return real(*args, **kwargs)

    return stopping_before


# PIPEPLAN_TEST_FAULT: (the rank it is for, the module, its function, the wrapper).
FAULTS = {
    # rank 0 pauses in its first checkpoint's write, pipeplan's checksum of its files
    "pause_in_checkpoint": ("0", "executor.checkpoint", "file_sha256", _pausing_sha256),
    # rank 1 stops once its part of the first checkpoint is done (the gather to rank 0)
    "stop_in_checkpoint": ("1", "executor.checkpoint", "save", _stopping_after),
    # rank 1 stops as its first checkpoint's gather to rank 0 begins
    "stop_before_checkpoint_gather": ("1", "executor.checkpoint", "save", _stopping_before),
    # rank 1 stops at its first wait for one-sided work (every rank has built its task)
    "stop_at_a_one_sided_wait": ("1", "executor.worker", "one_sided_done", _stopping_before),
}


class WrapsOnImport:
    """A finder first on `sys.meta_path`: the module `name`, found by the finders after it,
    has its `attribute` wrapped (`wrap(real)`) once it is executed, before its importer sees
    it; then it leaves `sys.meta_path`."""

    def __init__(self, name: str, attribute: str, wrap) -> None:
        self.name, self.attribute, self.wrap = name, attribute, wrap

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            setattr(module, self.attribute, self.wrap(getattr(module, self.attribute)))
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Where PIPEPLAN_TEST_FAULT names a fault of FAULTS and RANK is its rank: its finder."""
    fault = FAULTS.get(os.environ.get("PIPEPLAN_TEST_FAULT", ""))
    if fault is None or os.environ.get("RANK") != fault[0]:
        return
    _, name, attribute, wrap = fault
    if name in sys.modules:  # not at start-up: nothing of pipeplan's is imported yet
        module = sys.modules[name]
        setattr(module, attribute, wrap(getattr(module, attribute)))
    else:
        sys.meta_path.insert(0, WrapsOnImport(name, attribute, wrap))


install()
