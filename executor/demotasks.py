"""The demo's target task: the project's digits under another labelling, for fine-tuning.

`pipeplan demo` needs a pretrained model and nothing may be downloaded, so it pretrains on a
source task made from data the project already has, the ten digit classes (`--data digits`),
then fine-tunes on this target task: each image labelled with its digit mod 5, so 0 and 5, 1 and
6, … share a class. The target is coarser than the source, as fine-tuning an ImageNet model on
a smaller label set is: the pretrained blocks already tell every digit apart and mostly need
not change, which is the regime freezing is made for. The target uses the same stratified
split as `digits` (the same seed), so no held-out image was trained on in pretraining.

    pipeplan run --model runs/demo-pretrained/model --data executor.demotasks:target …
"""

from __future__ import annotations

from executor.data import TaskData, TensorPairs, load_digits

TARGET_CLASSES = 5
# Every other training image: a fine-tuning set smaller than the pretraining one, as it
# usually is, and a demo half as long (the split is stratified, so every class keeps half).
TRAIN_EVERY = 2


def target(seed: int = 0) -> TaskData:
    """`digits` (split drawn from `seed`) with label = digit mod 5, trained on every other
    image of the training split; held out on the whole held-out split."""
    digits = load_digits(seed)

    def relabel(pairs: TensorPairs, every: int = 1) -> TensorPairs:
        return TensorPairs(pairs.inputs[::every], pairs.labels[::every] % TARGET_CLASSES)

    return TaskData(
        "digits-mod-5",
        relabel(digits.train, TRAIN_EVERY),
        relabel(digits.eval),
        num_labels=TARGET_CLASSES,
    )
