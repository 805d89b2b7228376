"""The demo's source task: the project's digits under another labelling, for pretraining.

`pipeplan demo` needs a pretrained model and nothing may be downloaded, so it pretrains on a
source task made from data the project already has, then fine-tunes on the target task, the
ten digit classes (`--data digits`). The source labels each image with its digit mod 5, so
0 and 5, 1 and 6, … share a class: telling five classes apart teaches the early layers the
strokes of every digit without ever seeing the target's labels. The source uses the same
stratified split as `digits` (the same seed), so no held-out target image is trained on.

    pipeplan run --model vit-digits --data executor.demotasks:source --freeze none
"""

from __future__ import annotations

from executor.data import TaskData, TensorPairs, load_digits

SOURCE_CLASSES = 5


def source(seed: int = 0) -> TaskData:
    """`digits` (split drawn from `seed`) with label = digit mod 5."""
    digits = load_digits(seed)

    def relabel(pairs: TensorPairs) -> TensorPairs:
        return TensorPairs(pairs.inputs, pairs.labels % SOURCE_CLASSES)

    return TaskData(
        "digits-mod-5",
        relabel(digits.train),
        relabel(digits.eval),
        num_labels=SOURCE_CLASSES,
    )
