"""A checkpoint against the run's own records (run.jsonl): what a resume holds it to before
any rank starts, and report, calibrate and export alike, so that every command given a run
says the same about it.

    check_manifest_records(manifest, read_records(run_dir / "run.jsonl"), run_dir, cfg)
    check_older_manifests(manifest, records, run_dir, cfg)   # every kept checkpoint before it
    check_older_manifests(manifest, records, run_dir, cfg, position)   # export, resume: + model
    gradient_decisions(manifest, phases, cfg)   # grad_history entries AutoFreeze made by then
    run_ends(manifest, phases)                  # the epochs' ends where a run ended by then
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from executor.checkpoint import (
    check_manifest_layers,
    check_sums_measured,
    checkpoints_written,
    folder_manifest,
    kept_manifest,
    manifest_path,
)
from executor.data import BUILTINS
from pipeplan.errors import InputFileError
from pipeplan.formats import (
    STEP_RECORDS,
    CheckpointManifest,
    EpochRecord,
    PhaseRecord,
    Profile,
    RunConfig,
    load,
)
from pipeplan.formats.base import first_difference, read_input
from pipeplan.formats.run import torn_tail


def check_manifest_records(
    manifest: CheckpointManifest, records: list, run_dir: Path, cfg: RunConfig
) -> None:
    """The checkpoint against its run: its model is run.json's (`cfg`), and against run.jsonl:
    the records reach it (an emptied or cut run.jsonl resumed, and the run's history was
    lost), every epoch it follows with its record; its phase is a recorded one, whose layout
    and world it was taken in; its epoch is the one its last step was recorded in (or the
    next, at an epoch's start: a manifest saying epoch 1 at step 6 of a 2-step-epoch run
    trained epochs 1–2 again), and its step_in_epoch its steps into that epoch; the layers
    it names are its phase's model's; and its gradient history has one entry for each
    decision made by then (`gradient_decisions`: 50 entries after 2 epochs were taken as
    measurements, none as a run that never measured), the run ends it lists being resumes
    run.jsonl records."""
    where = manifest_path(run_dir, manifest)
    # Its model before its records: step-6's "bert-tiny" beside a vit-digits run.json was
    # reported, calibrated, exported and resumed from (twenty-sixth round); export and resume
    # said so of the latest checkpoint alone (`check_position`).
    if manifest.model != cfg.model:
        why = f"'{manifest.model}', but the run trains '{cfg.model}'"
        raise InputFileError(f"{where}: model: {why}")
    # Built-in data reads no file: the run writes no data.json, whose facts a manifest
    # records (`executor.task.data_record`). Facts there were reported and calibrated from,
    # the latest's or an older one's, where export refused them (the sixty-second round).
    if cfg.data in BUILTINS and manifest.data_facts is not None:
        raise InputFileError(
            f"{where}: data_facts is not null, but the run's data '{cfg.data}' is built in: "
            "the run writes no data.json, and its checkpoints record no facts of the data "
            "(null); the manifest was edited"
        )
    # The step before the checkpoint, not its epoch's record: a crash may tear the last
    # record, and a resume writes an epoch's record again (`read_records` leaves it out).
    steps = {r.step: r for r in records if isinstance(r, STEP_RECORDS)}
    last = steps.get(manifest.step - 1)
    if manifest.step > 0 and last is None:
        raise InputFileError(
            f"{run_dir / 'run.jsonl'}: the records end before step {manifest.step} of the "
            f"checkpoint step-{manifest.step} (epoch {manifest.epoch}); the run's history is lost"
        )
    check_epochs_recorded(manifest, records, run_dir)
    phase = next(
        (r for r in records if isinstance(r, PhaseRecord) and r.phase == manifest.phase), None
    )
    if phase is None:
        raise InputFileError(f"{where}: phase: {manifest.phase}, but run.jsonl has no such phase")
    if phase.start_step > manifest.step or (last is not None and last.phase > phase.phase):
        raise InputFileError(
            f"{where}: phase: {phase.phase} starts at step {phase.start_step} in run.jsonl, "
            f"which recorded step {manifest.step - 1} in phase {last.phase if last else '-'}"
        )
    # The phase its last step ran in, or one a freeze transition entered at the checkpoint's
    # step ("every transition is a checkpoint"): a resume's phase (or a later transition)
    # recorded there was taken as the checkpoint's own (twenty-third round).
    transition = phase.start_step == manifest.step and not phase.resumed
    if last is not None and last.phase != phase.phase and not transition:
        entered = "a resume entered it" if phase.resumed else "it starts"
        raise InputFileError(
            f"{where}: phase: {phase.phase}, but run.jsonl recorded step {last.step} in phase "
            f"{last.phase}, and phase {phase.phase} is no transition at step {manifest.step} "
            f"({entered} at step {phase.start_step})"
        )
    world = phase.pricing.cluster.num_devices
    if manifest.world_size != world:
        raise InputFileError(
            f"{where}: world_size: {manifest.world_size}, but phase {phase.phase} ran on "
            f"{world} ranks"
        )
    differs = None if manifest.layout is None else first_difference(manifest.layout, phase.layout)
    if differs is not None:  # the field, not the labels: two layouts may share one label
        raise _layout_disagrees(manifest, phase, run_dir, differs)
    if manifest.frozen_layers != phase.layout.frozen_layers:  # a manifest without a layout
        raise InputFileError(
            f"{where}: frozen_layers: {manifest.frozen_layers}, but phase {phase.phase} froze "
            f"{phase.layout.frozen_layers}"
        )
    if last is not None:
        expected = last.epoch if manifest.step_in_epoch > 0 else last.epoch + 1
        if manifest.epoch != expected:
            raise InputFileError(
                f"{where}: epoch: {manifest.epoch} at step {manifest.step}, but run.jsonl "
                f"recorded step {last.step} in epoch {last.epoch}"
            )
        check_step_in_epoch(manifest, records, where)
    check_within_epochs(manifest, records, where)
    # The layers it names are the model's, which the layout of its phase spans (the model is
    # not built to read a run): `check_position`'s, for report and calibrate too.
    check_manifest_layers(manifest, phase.layout.boundaries[-1], where)
    check_sums_profiled(manifest, phase, run_dir, where)
    phases = [r for r in records if isinstance(r, PhaseRecord) and r.phase <= manifest.phase]
    check_run_ends_recorded(manifest, phases, where)
    decisions = gradient_decisions(manifest, phases, cfg)
    if len(manifest.grad_history) != decisions:
        made = f"made {decisions} gradient decision{'s' * (decisions != 1)} by step"
        if cfg.freeze != "auto":
            made = "measures no gradients: none by step"
        raise InputFileError(
            f"{where}: grad_history: {len(manifest.grad_history)} entries, but --freeze "
            f"{cfg.freeze} {made} {manifest.step} (one entry each)"
        )
    check_history_recorded(manifest, records, phases, cfg, where)


def check_within_epochs(manifest: CheckpointManifest, records: list, where: Path) -> None:
    """The checkpoint is a position of the run its config describes: before its last epoch's
    end (config.epochs at least its epoch + 1), or that end itself, its run's final one, which
    the records go past only where they record a resume there (a run ends at its final
    checkpoint; --resume adds epochs). An older checkpoint's config.epochs of 2 six steps into
    epoch 2 (a final checkpoint in mid-epoch, no resume recorded) was read by every command,
    and resumed from (the sixty-first round).

        check_within_epochs(manifest, records, where)   # "…: config.epochs: 2, but …"
    """
    epochs, epoch, step = manifest.config.epochs, manifest.epoch, manifest.step
    into = manifest.step_in_epoch
    if epoch > epochs or (epoch == epochs and into > 0):
        end = (step - into) // epoch * epochs  # epoch > 0: epochs is ≥ 1
        raise InputFileError(
            f"{where}: config.epochs: {epochs}, but the checkpoint is at step {step}, {into} "
            f"step{'s' * (into != 1)} into epoch {epoch} (counted from 0): past the end of a "
            f"run of {epochs} epochs (step {end}, its final checkpoint)"
        )
    if epoch < epochs:
        return
    resumed = any(
        isinstance(r, PhaseRecord) and r.resumed and r.start_step == step for r in records
    )
    if not resumed and any(isinstance(r, STEP_RECORDS) and r.step >= step for r in records):
        raise InputFileError(
            f"{where}: config.epochs: {epochs} makes step {step} (epoch {epoch}'s start) its "
            f"run's final checkpoint, but run.jsonl records step {step} and later without a "
            "resume there; --resume is the one way a run goes past its end"
        )


def check_sums_profiled(
    manifest: CheckpointManifest, phase: PhaseRecord, run_dir: Path, where: Path
) -> None:
    """grad_norm_sums holds every active layer with parameters (`check_sums_measured`, the
    rule export and resume hold it to with the model built), the layers with parameters
    taken from the profile that priced the checkpoint's phase: its params are the model
    config's (`Profile` holds them so). step-30's sum of layer 9 deleted was reported and
    calibrated from, while export and resume refused it (the sixty-first round). A profile
    that is not there, or of another number of layers, is `check_priced_profiles`'s to name.

        check_sums_profiled(manifest, phase, run_dir, where)   # "…: grad_norm_sums: layer 9 …"
    """
    name = phase.pricing.profile
    if Path(name).name != name or not (run_dir / name).is_file():
        return
    layers = load(Profile, run_dir / name).layers
    if len(layers) != phase.layout.boundaries[-1]:
        return

    def refuse(field: str, why: str) -> None:
        raise InputFileError(f"{where}: {field}: {why}")

    check_sums_measured(manifest, [layer.params > 0 for layer in layers], refuse)


def check_step_in_epoch(manifest: CheckpointManifest, records: list, where: Path) -> None:
    """A mid-epoch checkpoint's step_in_epoch is its steps since the first step run.jsonl
    records in its epoch (`check_manifest_records` found the step before it there): the
    position `check_position` holds to the run's epoch length, held to the records, which
    report and calibrate read without the data. An older checkpoint's was held by nothing.

        check_step_in_epoch(manifest, records, where)   # "…: step_in_epoch: 1 at step 6, …"
    """
    if manifest.step_in_epoch == 0:
        return  # at its epoch's start: the step before it is the last epoch's (checked)
    first = min(
        r.step for r in records if isinstance(r, STEP_RECORDS) and r.epoch == manifest.epoch
    )
    if manifest.step - first != manifest.step_in_epoch:
        raise InputFileError(
            f"{where}: step_in_epoch: {manifest.step_in_epoch} at step {manifest.step}, but "
            f"run.jsonl records epoch {manifest.epoch} from step {first}: "
            f"{manifest.step - first} steps into it"
        )


def check_older_manifests(
    used: CheckpointManifest,
    records: list,
    run_dir: Path,
    cfg: RunConfig,
    position: Callable[[CheckpointManifest], None] | None = None,
) -> None:
    """Every checkpoint kept older than `used` (the one a command reads: the latest, or the
    one a resume or export falls back to or is given) is held to the rules `used` is: its
    manifest read to its schema, its step its folder's (`check_manifest_folder`), against
    run.jsonl and the run (`check_manifest_records`) and against `used` (`check_later_agrees`);
    run.json it is held to by `check_same_training`.
    Manifests only: no tensor file is read or hashed. A newer one is what the fallback passed
    over with its notice, or one `latest` does not name yet: not read. step-4's manifest
    beside the latest step-6 was read by no command but `export --checkpoint step-4`: any
    edit, even one of its schema, passed report, calibrate and export (twenty-fourth round).

        check_older_manifests(manifest, records, run_dir, cfg)   # InputFileError naming it

    `position`: export's and resume's check of each against the model they build
    (`check_position`), after its records', so that every command says the same first.
    """
    for manifest in older_manifests(used, run_dir):
        check_manifest_records(manifest, records, run_dir, cfg)
        if position is not None:
            position(manifest)
        check_later_agrees(manifest, used, run_dir)


def check_later_agrees(older: CheckpointManifest, used: CheckpointManifest, run_dir: Path) -> None:
    """What an older kept checkpoint carries forward is the later one's (`used`) so far: its
    config.epochs at most the later's (the one RunConfig field that may differ between them
    and grows only; nproc and the timeout are each resume's own, `check_same_training` holds
    the rest), and its grad_history the later's first entries (AutoFreeze only appends; a
    --freeze-every decision's entry has no record of its own to be held to).

        check_later_agrees(older, manifest, run_dir)   # "…/step-2/manifest.json: config.epochs…"
    """
    where = manifest_path(run_dir, older)
    if older.config.epochs > used.config.epochs:
        raise InputFileError(
            f"{where}: config.epochs: {older.config.epochs}, but the later checkpoint "
            f"step-{used.step} was trained with {used.config.epochs}; --resume adds epochs, "
            "never removes them"
        )
    later = used.grad_history
    index = next(
        (i for i, h in enumerate(older.grad_history) if i >= len(later) or h != later[i]), None
    )
    if index is not None:
        raise InputFileError(
            f"{where}: grad_history.{index} is not entry {index} of the later checkpoint "
            f"step-{used.step}'s ({manifest_path(run_dir, used)}); the history only grows, so "
            "one of the two was edited since the run trained"
        )


def older_manifests(used: CheckpointManifest, run_dir: Path) -> list[CheckpointManifest]:
    """The manifests of the checkpoints kept older than `used`, each read to its schema, its
    step its folder's and its files there of the sizes it records (`folder_manifest`, as the
    newest is read): InputFileError naming the first that is not. The sizes were held of the
    newest alone: an older one recording 12 bytes for a 6 MB model.pt, the run's one
    fallback, broken, passed every command (the fifty-seventh round).

        for older in older_manifests(manifest, run_dir): ...
    """
    manifests = []
    for path in checkpoints_written(run_dir / "checkpoints"):
        if _folder_step(path) >= used.step:
            continue
        manifests.append(folder_manifest(path))
    return manifests


def _folder_step(path: Path) -> int:
    """`_folder_step(Path("c/step-4"))` → 4: a `checkpoints_written` folder's step."""
    return int(path.name.removeprefix("step-"))


def _layout_disagrees(
    manifest: CheckpointManifest, phase: PhaseRecord, run_dir: Path, differs: tuple
) -> InputFileError:
    """The error for a manifest whose layout is not its phase's record, naming the file that
    was edited when the run's other checkpoints taken in that phase tell which: all agreeing
    with the manifest blame run.jsonl, all agreeing with the record blame the manifest (the
    twentieth round: run.jsonl's schedule edited was put on the unedited manifest).
    Otherwise both are named, neither taken for the truth."""
    field, value, ran = differs
    others = [
        m.layout
        for m in (kept_manifest(p) for p in checkpoints_written(run_dir / "checkpoints"))
        if m is not None and m.step != manifest.step and m.phase == phase.phase
        if m.layout is not None
    ]
    where = manifest_path(run_dir, manifest)
    if others and all(first_difference(o, manifest.layout) is None for o in others):
        return InputFileError(
            f"{run_dir / 'run.jsonl'}: phase {phase.phase}'s layout.{field} is {ran}, but "
            f"every checkpoint taken in it says {value}; it was edited since the run trained"
        )
    if others and all(first_difference(o, phase.layout) is None for o in others):
        return InputFileError(
            f"{where}: layout.{field}: {value}, but phase {phase.phase} ran {ran} (run.jsonl "
            "and the run's other checkpoints say so); it was edited since the run trained"
        )
    return InputFileError(
        f"{where}: layout.{field}: {value}, but phase {phase.phase} ran {ran} in "
        f"{run_dir / 'run.jsonl'}; one of the two was edited since the run trained"
    )


def check_history_recorded(
    manifest: CheckpointManifest,
    records: list,
    phases: list[PhaseRecord],
    cfg: RunConfig,
    where: Path,
) -> None:
    """Each grad_history entry of a decision at an epoch's end is that epoch's grad_norms in
    run.jsonl: the worker records the norms it decides with (`Trainer.end_epoch`). The
    nineteenth round edited a norm to 1e300 in the manifest (`where`) alone, and AutoFreeze's
    gradient criterion decided with it on resume. `phases`: run.jsonl's up to the
    checkpoint's; `check_epochs_recorded` found a record of every epoch before it.

        check_history_recorded(manifest, records, phases, cfg, manifest_path(run_dir, manifest))
    """
    recorded = {r.epoch: r.grad_norms for r in records if isinstance(r, EpochRecord)}
    for index, epoch in epoch_end_decisions(manifest, phases, cfg).items():
        entry, norms = manifest.grad_history[index], recorded[epoch]
        if entry == norms:
            continue
        differ = (k for k in entry.keys() | norms.keys() if entry.get(k) != norms.get(k))
        layer = min(differ, key=int)
        raise InputFileError(
            f"{where}: grad_history.{index}: layer {layer}'s norm {entry.get(layer)!r}, but "
            f"run.jsonl's epoch {epoch} record has {norms.get(layer)!r} (grad_norms), the "
            "norms the decision at that epoch's end was made with"
        )


def check_run_ends_recorded(
    manifest: CheckpointManifest, phases: list[PhaseRecord], where: Path
) -> None:
    """Each of `manifest.run_ends` is where run.jsonl records a resume (a phase resumed at
    that step): a run continued from its final checkpoint there. `phases`: run.jsonl's up to
    the checkpoint's.

        check_run_ends_recorded(manifest, phases, manifest_path(run_dir, manifest))
    """
    resumed = {p.start_step for p in phases if p.resumed}
    odd = next((s for s in manifest.run_ends or [] if s not in resumed), None)
    if odd is not None:
        raise InputFileError(
            f"{where}: run_ends: {manifest.run_ends} lists step {odd}, but run.jsonl records "
            f"no resume at step {odd} (no phase up to {manifest.phase} was resumed there)"
        )


def check_epochs_recorded(manifest: CheckpointManifest, records: list, run_dir: Path) -> None:
    """Every epoch before the checkpoint's has its record: the executor writes an epoch's
    record before the checkpoint that follows the epoch (the transition's at the next
    epoch's start, the final one, or any later), so no crash loses it. Deleted or torn
    (`read_records` leaves a torn last line out), the resumed run's records and metrics.csv
    lacked that epoch for good (eighteenth round).

        check_epochs_recorded(manifest, read_records(run_dir / "run.jsonl"), run_dir)
    """
    recorded = {r.epoch for r in records if isinstance(r, EpochRecord)}
    missing = next((e for e in range(manifest.epoch) if e not in recorded), None)
    if missing is None:
        return
    path = run_dir / "run.jsonl"
    torn = torn_tail(read_input(path)) is not None  # as `read_records` read it
    why = "; its last line is cut short, not a whole record" if torn else ""
    raise InputFileError(
        f"{path}: no record of epoch {missing}, which ended before the checkpoint "
        f"step-{manifest.step} (epoch {manifest.epoch}) was taken{why}; the run's history "
        "is lost"
    )


def gradient_decisions(
    manifest: CheckpointManifest, phases: list[PhaseRecord], cfg: RunConfig
) -> int:
    """How many gradient measurements `--freeze auto` made by the checkpoint: its
    grad_history holds one entry each (AutoFreeze.decide appends one per decision); other
    modes measure none. `phases`: run.jsonl's phase records up to the checkpoint's.

        gradient_decisions(manifest, phases, cfg)  # 1: 2 epochs of a 2-epoch run, resumed
    """
    return _decisions(manifest, phases, cfg)[0]


def epoch_end_decisions(
    manifest: CheckpointManifest, phases: list[PhaseRecord], cfg: RunConfig
) -> dict[int, int]:
    """The grad_history entries measured over an epoch, by index: the epoch whose end made
    the decision. The worker records the same norms as that epoch's `grad_norms`.

        epoch_end_decisions(manifest, phases, cfg)  # {1: 0}: N = 2, 3 steps an epoch, step 5
    """
    return _decisions(manifest, phases, cfg)[1]


def _decisions(
    manifest: CheckpointManifest, phases: list[PhaseRecord], cfg: RunConfig
) -> tuple[int, dict[int, int]]:
    """How many gradient decisions `--freeze auto` made by the checkpoint, and which of them
    (by index) were at an epoch's end (→ that epoch). Other modes make none.

    `auto` decides at the end of every epoch but the run's last, and with --freeze-every N
    after every N-th step (counted over the run) but at an epoch's end, where the end's
    decision is the one. A run's last epoch is where its final checkpoint was taken
    (`run_ends`: the checkpoint itself when final, or one a resume continued from); a
    periodic checkpoint at an epoch's start, and a resume of one, come after the decision.
    The epochs --resume adds end later.

        _decisions(manifest, phases, cfg)  # (3, {1: 0}): N = 2, 3 steps an epoch, step 5
    """
    if cfg.freeze != "auto":
        return 0, {}
    epoch, step = manifest.epoch, manifest.step
    # The checkpoint's position gives the epoch's length (`check_position` held it to the
    # run's); in epoch 0 no epoch has ended, and any length beyond the step counts alike.
    per_epoch = (step - manifest.step_in_epoch) // epoch if epoch else step + 1

    def within(at: int) -> int:
        """The N-th steps up to step `at`, less the epochs' ends: counted, not listed (a
        run of a million steps has as many)."""
        every = cfg.freeze_every
        return at // every - at // math.lcm(every, per_epoch) if every else 0

    ended = run_ends(manifest, phases)
    ends: dict[int, int] = {}
    for done in range(epoch):
        at = (done + 1) * per_epoch
        if at not in ended:
            ends[within(at) + len(ends)] = done
    return within(step) + len(ends), ends


def run_ends(manifest: CheckpointManifest, phases: list[PhaseRecord]) -> set[int]:
    """The epochs' ends (each an epoch's start step) up to the checkpoint where a run ended,
    so that no freeze decision was made there: the checkpoint itself when it is its run's
    final one (its epoch the epochs it was trained for; a periodic checkpoint at an epoch's
    start follows the decision), and the ends its run.jsonl-recorded resumes continued from
    (`manifest.run_ends`). A manifest written before that field lists none: then every phase
    resumed at an epoch's start was such a resume, as no periodic checkpoint was written at an
    epoch's end. A transition's start is never one (its decision moved the point).

        run_ends(manifest, phases)  # {4, 6}: 2 steps an epoch, finished at 4, extended to 6
    """
    epoch, step = manifest.epoch, manifest.step
    if epoch == 0:
        return set()
    per_epoch = max(1, (step - manifest.step_in_epoch) // epoch)  # 0: `check_position`'s
    if manifest.run_ends is not None:
        ended = set(manifest.run_ends)
    else:
        ended = {
            p.start_step
            for p in phases
            if p.resumed and 0 < p.start_step <= step and p.start_step % per_epoch == 0
        }
    # The final checkpoint: a fact of the manifest (its config is run.json when it was
    # taken, and --resume never removes epochs), not of its position alone.
    if manifest.step_in_epoch == 0 and epoch == manifest.config.epochs:
        ended.add(step)
    return ended - {p.start_step for p in phases if not p.resumed}
