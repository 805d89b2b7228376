"""A worked example of `--data module:function` (README, "Your own data"): toy film reviews as
token ids for the built-in `bert-synth` (32 tokens, vocabulary 512, 2 classes).

    pipeplan run --model bert-synth --data examples/reviews.py:load --epochs 2
    cd examples && pipeplan run --model bert-synth --data reviews:load --epochs 2

The contract, all of it:
- `load` is any function of the module; it may take `seed` (the run's `--seed` is passed).
- It returns a `TaskData(name, train, eval)`, or a tuple `(train, eval)` or
  `(train, eval, augmented)`.
- `train` and `eval` are map-style datasets: `len(ds)` and `ds[i]`.
- `ds[i]` is `(input, label)`: `input` has the shape and dtype the model takes (text models:
  int64 token ids of length --seq-len; images: float32 channels × height × width), `label` is
  `torch.tensor(class)`, an int64 scalar (a causal LM's label is instead its int64 token ids,
  -100 where the loss skips them).
- The classifier's head has `TaskData(..., num_labels=C)` outputs; without it, the largest
  label + 1 when the sets are `TensorPairs` (labels in memory), else the model's own.
- Items are deterministic: `ds[i]` gives the same sample every time it is read, because the
  activations of frozen layers are cached per sample index. Random augmentation must say so
  (`augmented=True`); the cache is then off.
- Padded samples hold -100 (`pipeplan.models.PADDING`, not the pad token's id) at padding and
  set `padded=True`: the model then masks the padding (profile it with --padding-mask).
"""

import numpy as np
import torch
from torch.utils.data import Dataset

from executor.data import TaskData

LENGTH = 32  # the tokens bert-synth takes
POSITIVE = ["great", "moving", "funny", "superb", "charming", "clever", "gripping", "warm"]
NEGATIVE = ["dull", "boring", "clumsy", "awful", "flat", "tedious", "silly", "cold"]
FILLER = ["the", "a", "film", "plot", "cast", "scene", "was", "and", "but", "it", "very", "so"]
# Token ids start at 3: 0..2 are padding and the special tokens in BERT-style vocabularies.
VOCAB = {word: 3 + i for i, word in enumerate(FILLER + POSITIVE + NEGATIVE)}


class Reviews(Dataset):
    """Review i is drawn from its own generator, seeded by (seed, split, i): any item can be
    read in any order, any number of times, and is always the same."""

    def __init__(self, size: int, seed: int, split: int):
        self.size, self.seed, self.split = size, seed, split

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, self.split, index])
        positive = int(rng.integers(0, 2))  # the class
        # Opinion words lean to the class: 6 of them, at least 4 of its own kind.
        own = int(rng.integers(4, 7))
        mine, other = (POSITIVE, NEGATIVE) if positive else (NEGATIVE, POSITIVE)
        words = [*rng.choice(mine, own), *rng.choice(other, 6 - own)]
        words += list(rng.choice(FILLER, LENGTH - len(words)))
        rng.shuffle(words)
        ids = torch.tensor([VOCAB[str(w)] for w in words], dtype=torch.int64)
        return ids, torch.tensor(positive)


def load(seed: int = 0) -> TaskData:
    """2000 training and 400 held-out reviews, the same for the same seed."""
    train, held_out = Reviews(2000, seed, split=0), Reviews(400, seed, split=1)
    return TaskData("reviews", train, held_out, num_labels=2)
