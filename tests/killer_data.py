"""A `--data module:function` for fault tests: rank 1 SIGKILLs itself while reading a batch."""

import os
import signal

import torch.distributed as dist

from executor.data import TaskData, load_data
from pipeplan import models


class DiesOnRank1:
    def __init__(self, inner, after: int):
        self.inner, self.after, self.reads = inner, after, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        self.reads += 1
        if self.reads > self.after and dist.is_initialized() and dist.get_rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner[index]


def digits_then_die(seed: int = 0) -> TaskData:
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    return TaskData("digits-die", DiesOnRank1(data.train, after=200), data.eval, False)


def digits_die_once(seed: int = 0) -> TaskData:
    """Digits; rank 1 dies after PIPEPLAN_TEST_KILL_AFTER item reads if that is set (the
    resumed run, started without it, reads the same data and lives)."""
    data = load_data("digits", models.build("vit-digits"), seed=seed)
    after = int(os.environ.get("PIPEPLAN_TEST_KILL_AFTER", "0"))
    train = DiesOnRank1(data.train, after=after) if after else data.train
    return TaskData("digits", train, data.eval, False)
