"""A run's task: its model and data resolved together, and the trained model written out.

The data decides what the model is built for: labels → classification with a head of as many
classes as the labels use (a checkpoint without a head of that size gets a fresh one, drawn
from --seed, with one notice); plain text or token-sequence labels → causal-lm; padded text →
the padding-mask channel. `launch.prepare` and then every rank build the same way from the
same seed, so all ranks hold the same weights: the checkpoint's, a fresh head included.

    seq, data = build_task(cfg)                      # launch.prepare and every rank
    record = data_record(cfg, data_facts(data, seq))  # launch.prepare: runs/NAME/data.json
    check_data_facts(record.facts, data_facts(data, seq), cfg.data, "rank 1")  # every rank
    found = data_modules_imported(cfg, known, seen)  # each rank, at each checkpoint …
    record = record_data_modules(run_dir, record, found)  # … rank 0 adds them to data.json
    check_data(run_dir, cfg)                         # a resume or export: the data unchanged
    check_data_kept(run_dir, manifest, where)        # … and data.json as the checkpoint saw it
    cfg = absolute_paths(cfg)                        # launch.prepare: what run.json records
    save_model(seq, run_dir, export_tokenizer(cfg, seq))  # the end of a run: runs/NAME/model/
    export_run("runs/r", "out/")                     # `pipeplan export`: the latest checkpoint
    export_run("runs/r", "out/", "step-40")          # … or a named one
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor import text
from executor.data import (
    TaskData,
    check_compatible,
    data_task,
    helper_files,
    imported_files,
    imported_places,
    is_helper_file,
    is_user_code,
    label_count,
    length,
    load_data,
    module_file,
    module_place,
    module_root,
    names_a_file,
)
from pipeplan import models
from pipeplan.errors import BadArgumentError, InputFileError, OutputError, PipeplanError, quoted
from pipeplan.fileio import (
    check_not_stdout,
    check_outside_runs,
    check_run_directory,
    not_a_new_directory,
    reading_run,
    stops_raised,
    write_atomic,
)
from pipeplan.formats import (
    CheckpointManifest,
    DataFacts,
    DataFile,
    DataRecord,
    RunConfig,
    dumps,
    load,
)
from pipeplan.formats.base import open_input
from pipeplan.formats.presets import config_path
from pipeplan.log import held

if TYPE_CHECKING:
    from pipeplan.models import LayerSequence

log = logging.getLogger("pipeplan.run")
MODEL_DIR = "model"  # runs/NAME/model/: the trained transformers model
DATA_RECORD = "data.json"  # runs/NAME/data.json: what the data files were at the start


def build_task(
    cfg: RunConfig,
    quiet: bool = False,
    from_checkpoint: bool = False,
    built: Callable[[LayerSequence], None] | None = None,
) -> tuple[LayerSequence, TaskData]:
    """The run's model and data, checked against each other. `quiet` keeps the fresh-head
    notice for the first build (launch.prepare) only, not once per rank. `from_checkpoint`:
    a checkpoint then gives every weight (a resume, an export), so the model is drawn at
    random; the model folder's weights are not read, and need not still be there. `built` is
    called with the model as soon as it is built, before the data is read against it (a
    rank holds it from then: `data.hold_rank_objects`).

        seq, data = build_task(cfg, quiet=True, from_checkpoint=True)   # then restore(…)
    """
    if from_checkpoint:  # moved away since the run, they refused a resume (twentieth round)
        cfg = cfg.model_copy(update={"init": "random"})
    spec = cfg.data
    if cfg.tokenizer is not None and not text.is_text_spec(spec):
        raise BadArgumentError(text.not_text(spec))
    with _notices(quiet):
        if spec == "synth-text":  # generated for the model: its task, length and vocabulary
            seq = _build(cfg, cfg.task, built=built)
            data = load_data(spec, seq, cfg.seed)
        elif text.is_text_spec(spec):
            text.check_two_files(spec)
            corpus = text.read_corpus(spec, cfg.seed)
            task = _text_task(corpus, cfg.task, spec, quiet)
            classes, names = None, None
            if task == "classification":  # the labels the rows use, not the head's size
                _check_classes(len({*corpus.train_labels, *(corpus.eval_labels or [])}), spec)
                classes, names = corpus.num_labels, corpus.label_names
            # Named labels: numbered as the model's config numbers them (`models.label_order`),
            # which the tokenized labels then follow (`text.tokenize`).
            seq = _build(cfg, task, classes, names, padding_mask=True, built=built)
            data = text.tokenize(corpus, cfg.tokenizer, seq, quiet)
        else:
            data = load_data(spec, None, cfg.seed)
            task = cfg.task or data_task(data)
            classes = _classes(data, task)
            _check_classes(classes, spec)
            seq = _build(cfg, task, classes, padding_mask=data.padded, built=built)
        check_compatible(data, seq)
    return seq, data


def _build(
    cfg: RunConfig,
    task: str | None,
    num_labels: int | None = None,
    label_names: list[str] | None = None,
    *,
    padding_mask: bool = False,
    built: Callable[[LayerSequence], None] | None = None,
) -> LayerSequence:
    seq = models.build(
        cfg.model,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        dropout=cfg.dropout,
        init=cfg.init,
        task=task,
        num_labels=num_labels,
        label_names=label_names,
        padding_mask=padding_mask,
    )
    if built is not None:
        built(seq)
    return seq


def _text_task(corpus: text.Corpus, task: str | None, spec: str, quiet: bool = False) -> str:
    """Labelled text is classification, plain text causal-lm, unless --task says otherwise
    (a causal LM may train on labelled text: the labels are then not used, which is said
    once, unless `quiet`; found by the twentieth round: they were dropped without a word)."""
    if task == "causal-lm" and corpus.labelled and not quiet:
        log.warning(f"{spec}: --task causal-lm trains on the text only; its labels are not used")
    if task is None:
        return "classification" if corpus.labelled else "causal-lm"
    if task == "classification" and not corpus.labelled:
        raise BadArgumentError(
            f"--task classification needs labels, and {spec} has text only; add a label to "
            "every row, or train a decoder with --task causal-lm"
        )
    return task


def _classes(data: TaskData, task: str) -> int | None:
    """The head's size for classification data; None when the data does not say (then the
    model keeps its own and check_compatible names any label outside it)."""
    if task != "classification" or length(data.train, data.name, "train") == 0:
        return None
    return label_count(data)


def _check_classes(classes: int | None, spec: str) -> None:
    """A classifier needs two classes: transformers reads num_labels=1 as regression, and a
    single class has nothing to learn."""
    if classes is not None and classes < 2:
        raise BadArgumentError(
            f"data {quoted(spec)} has {classes} class{'es' if classes != 1 else ''}; "
            "classification needs at least 2 classes (label the rows with two or more labels, "
            "or train a decoder with --task causal-lm)"
        )


@contextlib.contextmanager
def _notices(quiet: bool) -> Iterator[None]:
    """Without the model builder's warnings, and those of the user's data code as the data
    is loaded and checked (`data._pass_on`), when `quiet` (they were given once already:
    each rank said the data's again on the console, twenty-eighth round)."""
    loggers = [logging.getLogger("pipeplan.models"), logging.getLogger("pipeplan.data")]
    levels = [logger.level for logger in loggers]
    if quiet:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# --------------------------------------------------------------------------- the data's identity


def data_files(spec: str) -> list[Path]:
    """The files `spec` reads: one or two text files, or the .py file of `file.py:function`;
    none for built-ins and installed modules."""
    if text.is_text_spec(spec):
        return [Path(p) for p in spec.split(",")]
    target = spec.rpartition(":")[0]
    return [Path(target)] if target.endswith(".py") else []


def read_files(cfg: RunConfig) -> list[Path]:
    """Every file the run's data is read from, as data.json lists them: the files --data
    names (`data_files`), a text run's tokenizer's (edited, it turns the same text into other
    ids), and the module `module:function` imports from here (`data.module_file`).

        read_files(cfg)   # [Path("/home/me/examples/reviews.py")] for --data reviews:load
    """
    files = data_files(cfg.data)
    if text.is_text_spec(cfg.data):
        return files + tokenizer_files(cfg)
    module = None if files else module_file(cfg.data)
    return files + ([module] if module is not None else [])


def tokenizer_files(cfg: RunConfig) -> list[Path]:
    """The files of the tokenizer a text run reads (--tokenizer, else the model directory's
    own): `text.tokenizer_files`."""
    if cfg.tokenizer:
        return text.tokenizer_files(Path(cfg.tokenizer))
    config = config_path(cfg.model)  # a built-in has no tokenizer, even beside a folder
    return [] if config is None else text.tokenizer_files(config.parent)


def recorded_paths(cfg: RunConfig) -> dict[str, list[str]]:
    """The paths a configuration names, by field: the model folder (not a built-in name),
    the data's files, the tokenizer, the profile and the plan.

        recorded_paths(cfg)   # {"model": ["ckpt"], "data": ["train.jsonl", "eval.csv"], …}
    """
    paths = {"model": [] if config_path(cfg.model) is None else [cfg.model]}
    paths["data"] = [str(p) for p in data_files(cfg.data)]
    for field in ("tokenizer", "profile", "plan"):
        value = getattr(cfg, field)
        paths[field] = [] if value is None else [value]
    return paths


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """`cfg` with every path it names absolute (resolved): what run.json records, so that a
    resume or an export from another directory, or a torchrun node on a shared file system,
    reads the same files. A built-in model or data name, or an installed module, is kept.

        absolute_paths(cfg).data   # "/home/me/reviews.jsonl" for --data reviews.jsonl
    """
    paths = recorded_paths(cfg)

    def absolute(value: str) -> str:
        return str(Path(value).resolve())

    singles = {field: values for field, values in paths.items() if field != "data" and values}
    update = {field: absolute(value) for field, [value] in singles.items()}
    if text.is_text_spec(cfg.data):
        update["data"] = ",".join(absolute(part) for part in paths["data"])
    elif paths["data"]:  # path/to/file.py:function
        update["data"] = f"{_placed(paths['data'][0])}:{cfg.data.rpartition(':')[2]}"
    return cfg.model_copy(update=update)


def _placed(value: str) -> str:
    """`path/to/file.py` absolute, its folder resolved and the file itself not: a link there
    (`mydata.py -> ../ext/real.py`) is the user's module in the user's folder, whose helpers
    beside it are the run's (`data.module_root`). Found by the sixty-ninth round: resolved,
    run.json named the link's target, and a helper beside the link was neither recorded nor
    checked by a resume.

        _placed("./mydata.py")   # "/home/me/mydata.py", a link to /ext/real.py or not
    """
    path = Path(value)
    if path.name in ("", ".", ".."):
        return str(path.resolve())
    return str(path.parent.resolve() / path.name)


def check_recorded_paths(run_dir: Path, cfg: RunConfig) -> None:
    """A run prepared before run.json recorded absolute paths (`absolute_paths`) holds paths
    relative to the directory it was started from, which it does not record: from another
    directory one was reported missing, or data.json as naming files the run does not read.
    InputFileError naming the field and that directory.

    The model folder, data and tokenizer, which the command reads again, gone since (moved
    or deleted) are named as run.json's: "/tmp/rt/bert: no such file" did not say that it was
    the run's model folder (twenty-sixth round). The profile and the plan need not stay: the
    run keeps its copies."""
    for field, values in recorded_paths(cfg).items():
        for value in values:
            path = Path(value)
            if path.exists() or path.is_symlink():
                continue
            if not path.is_absolute():
                raise InputFileError(
                    f"{run_dir / 'run.json'}: {field} names '{value}', a path relative to the "
                    f"directory the run was started from, and {Path.cwd()} holds no such path; "
                    "run this command from that directory"
                )
            if field in ("model", "data", "tokenizer"):
                raise InputFileError(
                    f"{run_dir / 'run.json'}: {field} names {value}, which is gone (moved or "
                    "deleted since the run started); the run reads it again: restore it there"
                )


def data_record(cfg: RunConfig, facts: DataFacts) -> DataRecord | None:
    """What the run's data files hold now (sha256 of their bytes), the label names text
    data gives, and what the launcher checked of the data (`facts`, `data_facts`); None when
    the data reads no file and is no code of yours (built-in data: the same in every
    process). Called after build_task read them: for `module:function` and `file.py:function`
    data the user's modules it brought in (`data.helper_files`) are listed after its own file.
    An installed module's data has a record with no file: its facts.

        record = data_record(cfg, data_facts(data, seq))   # launch.prepare: data.json
    """
    from executor.checkpoint import file_sha256

    files = read_files(cfg)
    if not text.is_text_spec(cfg.data):  # the module first: `check_data_module` reads it there
        files += [p for p in helper_files(cfg.data) if p not in files]
    if not files and not is_user_code(cfg.data):
        return None
    names = label_names(cfg)
    try:
        hashed = [DataFile(path=str(p), sha256=file_sha256(p)) for p in files]
    except OSError as exc:
        raise InputFileError(f"{cfg.data}: cannot read the data ({exc})") from None
    return DataRecord(data=cfg.data, files=hashed, label_names=names, facts=facts)


# How `check_data_facts` says each fact of the data (None: a causal LM has no classes).
FACT_WORDS = {
    "train_samples": "{} training samples",
    "eval_samples": "{} eval samples",
    "num_labels": "{} classes",
    "padded": "TaskData(padded={})",
    "augmented": "TaskData(augmented={})",
}


def data_facts(data: TaskData, seq: LayerSequence) -> DataFacts:
    """What the launcher checked of the run's data and model (`launch.check_run`): its sets'
    lengths (`length`, as the checks read them), the head's classes, and whether it is
    padded or augmented. data.json records them (`data_record`); each rank's own data must
    give them again (`check_data_facts`).

        data_facts(data, seq)   # DataFacts(train_samples=256, eval_samples=64, num_labels=10, …)
    """
    classifier = getattr(seq, "task", "classification") == "classification"
    return DataFacts(
        train_samples=length(data.train, data.name, "train"),
        eval_samples=length(data.eval, data.name, "eval"),
        num_labels=seq.num_labels if classifier else None,
        padded=data.padded,
        augmented=data.augmented,
    )


# What a rank holds for each sample of the run's sets, whatever the sample is (`len()` alone
# sizes it; the samples are read a batch at a time). Found by the thirty-third round: a
# `module:function` set of len() 10**12 was prepared and its rank started, then the epoch's
# order asked for 8 TB ("DefaultCPUAllocator: can't allocate memory"), and a run folder was
# left to delete; 10**9 would take ~48 GB a rank at each epoch's start without a ulimit.
# - The epoch's order (`worker.replica_order`): DistributedSampler's torch.randperm(n).tolist()
#   (8 bytes a sample, then a list slot and an int object), its slice to the replica's share,
#   and the int64 tensor kept. Measured (thirty-third round) as the growth of ru_maxrss over a
#   process's baseline while `replica_order` built the order of 10**7 and 2 * 10**7 samples,
#   for 1 and 2 replicas: 48.2-48.4 bytes a training sample, whatever the replicas.
ORDER_BYTES = 48
# - Evaluation's indices (`worker.evaluate`): torch.arange(eval samples), 8 bytes a sample,
#   held whole while each replica walks its stride of it.
EVAL_ORDER_BYTES = 8
# - The AutoCache's tables, where it caches (`cache.ActivationCache`, on): a byte a training
#   sample of the node's map of filled rows (/dev/shm: host memory, a page at a time as it
#   fills), and, when a checkpoint describes the cache or a freeze point grows, the filled
#   rows' indices (`filled_rows`: np.flatnonzero, 8 bytes each) and a byte each to tell the
#   in-memory ones. Counted from the code, a byte a sample each: the map is a sparse file
#   of one byte a sample, and the indices int64.
CACHE_TABLE_BYTES = 1 + 8 + 1


def check_index_memory(cfg: RunConfig, facts: DataFacts, ranks: int) -> None:
    """The per-sample index structures of a rank (ORDER_BYTES a training sample,
    EVAL_ORDER_BYTES an eval sample, CACHE_TABLE_BYTES a training sample where the AutoCache
    is on) fit in what each of the `ranks` that share this host may still take
    (`models.memory_left`, as text data's token ids are held to it): else BadArgumentError
    naming the data, its samples, the bytes and the limit, before the run folder is
    prepared (and at a resume, before a rank starts).

        check_index_memory(cfg, data_facts(data, seq), ranks=2)
        # BadArgumentError: data 'huge:load': 1,000,000,000,000 training and 100 eval samples
        # take 54,016.7 GiB of sample indices in each rank (…); that is more than the …
    """
    from executor.cache import cache_allowed
    from pipeplan.models import memory_left, memory_words, size_words

    train, held_out = facts.train_samples, facts.eval_samples
    cached = cfg.cache and cache_allowed(facts.augmented)[0]
    per_sample = ORDER_BYTES + (CACHE_TABLE_BYTES if cached else 0)
    need = train * per_sample + held_out * EVAL_ORDER_BYTES
    left = memory_left(ranks)
    if left is None or need <= left[0]:
        return
    table = f", {CACHE_TABLE_BYTES} more for the AutoCache's tables" if cached else ""
    raise BadArgumentError(
        f"data {quoted(cfg.data)}: {train:,} training and {held_out:,} eval samples take "
        f"{size_words(need)} of sample indices in each rank ({ORDER_BYTES} bytes a training "
        f"sample for the epoch's shuffled order{table}, {EVAL_ORDER_BYTES} an eval sample for "
        f"evaluation's order); that is more than {memory_words(left, 'each rank')}; run pipeplan "
        "with more memory, or give a data set of fewer samples"
    )


def check_data_facts(
    recorded: DataFacts | None,
    got: DataFacts,
    spec: str,
    who: str,
    resumed: Path | None = None,
    why: str = "a resume trains on the data its run started with",
) -> None:
    """The data a process built (`got`) is the data the launcher checked (`recorded`,
    data.json's; None in a run prepared before it was recorded, or built-in data): every
    rank calls `module:function` again, and one whose `__len__` differed (the process's
    RANK, a file appended to, an unseeded subsample) trained another epoch than checked, or,
    differing between ranks, hung the run for --collective-timeout, then named as a
    collective's failure (the thirty-second round). `who` names the process as the line
    says it: "rank 1" before its first collective; a resume's launcher, or an export, gives
    the run directory (`resumed`): the data must be what the run started with, `why` says
    for what.

        check_data_facts(record.facts, data_facts(data, seq), "lend:load", "rank 1")
        # BadArgumentError: data 'lend:load' gave rank 1 512 training samples; the launcher
        # checked 256: a data function must return the same data in every process
    """
    if recorded is None:
        return
    for field in FACT_WORDS:
        mine, checked = getattr(got, field), getattr(recorded, field)
        if mine == checked:
            continue
        said = _fact_words(got, field)
        checked = "none" if checked is None else checked
        if resumed is not None:
            raise BadArgumentError(
                f"data {quoted(spec)} gave {who} {said}; the run started with {checked} "
                f"({resumed / DATA_RECORD}): {why}; restore it or start a new run"
            )
        raise BadArgumentError(
            f"data {quoted(spec)} gave {who} {said}; the launcher checked {checked}: a data "
            "function must return the same data in every process"
        )


def read_data_record(run_dir: Path) -> DataRecord | None:
    """The run's data.json; None without one (data that reads no file). A rank reads it as
    it starts, and keeps it (`record_data_modules`).

        read_data_record(Path("runs/exp1"))   # DataRecord(data="mydata.py:load", files=[…])
    """
    path = run_dir / DATA_RECORD
    return load(DataRecord, path) if path.exists() else None


def data_modules_imported(cfg: RunConfig, known: set[str], seen: set[str]) -> list[DataFile]:
    """A rank's, at each checkpoint: your own modules its data brought in (`data.helper_files`,
    the launcher's rule: imported by the module, by `load`, or since, by a `__getitem__` or
    `__len__` as the rank read its sets) that `known` lacks (data.json's files, then those
    this rank found before), each with the sha256 of its file now; `known` gains them, and
    `seen` the names of the modules looked at (the next checkpoint looks at new ones only).
    Found by the thirty-first round: a helper a `__getitem__` imported only for items the
    launcher's checks never read was imported by the ranks alone, unlisted in data.json, and
    a resume after it was edited trained on other data without a word.

        found = data_modules_imported(cfg, known, seen)   # [DataFile(path="/home/me/l.py", …)]
    """
    from executor.checkpoint import file_sha256

    found = []
    for path in helper_files(cfg.data, seen):
        if str(path) in known:
            continue
        known.add(str(path))
        try:
            found.append(DataFile(path=str(path), sha256=file_sha256(path)))
        except OSError as exc:  # gone since it was imported: a resume imports it again
            log.warning(
                "%s: a module of yours the data '%s' imported, but it cannot be read now (%s): "
                "data.json does not record it; keep it unchanged while the run may be resumed",
                path, cfg.data, exc.strerror or exc,
            )  # fmt: skip
    return found


def record_data_modules(
    run_dir: Path, record: DataRecord | None, found: list[DataFile]
) -> DataRecord | None:
    """Rank 0's, at each checkpoint before its manifest is written: `record` (data.json as
    the run started) with `found` (every rank's `data_modules_imported`) added after its
    files, written to data.json atomically where any is new; returned, for the manifest. A
    resume or an export then refuses one of them edited (`check_data`), as it refuses the
    modules the launcher recorded. A file's sha256 is the first rank's, taken at the first
    checkpoint after its import. data.json is never read again mid-run: an edit made to it
    meanwhile was taken into the next checkpoint's manifest (the thirty-first round's notes),
    and a resume then trusted it (`check_data_kept`).

        record = record_data_modules(run_dir, record, [DataFile(path="/home/me/lazy.py", …)])
    """
    if record is None:  # data whose module has no file: nothing of yours to list
        return None
    listed = {file.path for file in record.files}
    new = []
    for file in found:
        if file.path not in listed:
            listed.add(file.path)
            new.append(file)
    if not new:
        return record
    record = record.model_copy(update={"files": [*record.files, *new]})
    write_atomic(run_dir / DATA_RECORD, dumps(record))
    return record


def _what_reads(cfg: RunConfig) -> tuple[str, str]:
    """What reads data.json's files, and its verb, for its refusals: text data "and its
    tokenizer"; a module or file.py the folder the modules it imports may come from (a
    module:function run has no tokenizer: twenty-eighth round).

        _what_reads(cfg)   # ("run.json's data 'm:load' (its module, and yours …)", "s")
    """
    data = f"run.json's data '{cfg.data}'"
    if text.is_text_spec(cfg.data):
        return f"{data} and its tokenizer", ""
    root = module_root(cfg.data)
    if root is None:
        return data, "s"
    return f"{data} (its module, and yours it imports from {root})", "s"


def _made_since(missing: list[str], record: Path) -> str | None:
    """The first of `missing` whose inode changed after `record` was last written (a file
    made or moved in since), None if each is older: then the record lost it."""
    try:
        written = record.stat().st_mtime_ns
        return next((m for m in missing if Path(m).stat().st_ctime_ns > written), None)
    except OSError:
        return None


def _checkpoint_data(run_dir: Path) -> str | None:
    """The --data of run.json as the run's latest checkpoint holds it, or None (no checkpoint,
    or one that cannot be read: the resume's own checks say why). Which of run.json and
    data.json to blame when they disagree (the fifty-seventh round: data.json's edit was
    blamed on run.json, and "restore it" sent the user to edit the good file)."""
    from executor.checkpoint import has_checkpoint, latest, read_manifest

    if not has_checkpoint(run_dir):
        return None
    try:
        return read_manifest(latest(run_dir)).config.data
    except (PipeplanError, OSError):
        return None


def check_data(run_dir: Path, cfg: RunConfig) -> None:
    """Before the task is rebuilt from run.json (a resume, an export): the data must be what
    the run started with, or label ids would silently change meaning. data.json must list
    exactly the files run.json's data and tokenizer read (deleted, or its list emptied, it
    switched the check off), each a regular file within the input limit before it is hashed
    (a FIFO or /dev/zero hung the command), and its label_names the names the data gives.
    Runs whose data reads no file (built-in data) need no data.json."""
    from executor.checkpoint import handle_sha256

    check_recorded_paths(run_dir, cfg)  # first: a relative path read from elsewhere
    path = run_dir / DATA_RECORD
    expected = [str(p) for p in read_files(cfg)]
    if not path.exists() and not path.is_symlink():
        if expected:
            raise InputFileError(
                f"{path}: no such file, but run.json's data '{cfg.data}' reads files; the "
                "run's record of its data is gone, so edited data cannot be told apart"
            )
        return
    record = load(DataRecord, path)
    if record.data != cfg.data:
        if _checkpoint_data(run_dir) == cfg.data:  # run.json is as the run trained: data.json
            raise InputFileError(
                f"{path}: data '{record.data}', but the run trained on '{cfg.data}' (run.json "
                "and its checkpoint say so); data.json was edited since: restore data.json or "
                "start a new run"
            )
        raise InputFileError(
            f"{run_dir / 'run.json'}: data '{cfg.data}' is not the data the run started with "
            f"('{record.data}', {path}); restore it or start a new run"
        )
    listed = [file.path for file in record.files]
    check_data_module(path, cfg.data, listed, expected)
    extra = sorted(set(listed) - set(expected))
    missing = sorted(set(expected) - set(listed))
    twice = sorted({p for p in listed if listed.count(p) > 1})
    if not text.is_text_spec(cfg.data):
        # A module's helpers are whatever it imported when the run started (`data_record`):
        # any of the user's .py files under its folder may be listed; each is hashed below.
        # Through a link too, the module's file as well: the run's folder moved, a link left
        # where it was.
        extra = [
            p
            for p in extra
            if not any(_same_file(p, e) for e in missing)
            and not is_helper_file(cfg.data, Path(p))
            and not is_helper_file(cfg.data, Path(os.path.realpath(p)))
        ]
        missing = [p for p in missing if not any(_same_file(p, e) for e in listed)]
    reads, s = _what_reads(cfg)
    folder = cfg.tokenizer or cfg.model  # a text run's tokenizer, absolute in run.json
    # In the folder or (chat templates) a folder of it.
    inside = [p for p in extra if Path(folder) in Path(p).parents]
    gone = [p for p in inside if not Path(p).is_file()]
    if gone and text.is_text_spec(cfg.data):
        # A tokenizer's file deleted, or a folder or FIFO put in its place, since: data.json
        # is right about what the run read (forty-ninth and fiftieth rounds: "restore
        # data.json", which was never edited).
        what = "gone, moved or deleted" if not os.path.lexists(gone[0]) else "not a regular file"
        raise InputFileError(
            f"{gone[0]}: read by the run ({path} lists it) but {what} since the run started; "
            "restore it there or start a new run"
        )
    if extra and (then := _run_folder(cfg.data, listed, extra[0])) is not None:
        # data.json is right: the module is imported from another folder here, whose
        # helpers are not the run's (the seventieth round: the working folder, or a folder
        # of PYTHONPATH, a link pointed elsewhere since; "restore data.json", never edited).
        raise InputFileError(
            f"{path}: the run's data module '{cfg.data.rpartition(':')[0]}' and its helpers "
            f"({extra[0]}) were imported from {then}, but here (in {Path.cwd()}) from "
            f"{module_root(cfg.data)}; run this command from the directory the run was "
            "started from, with its PYTHONPATH, or start a new run"
        )
    if extra:
        raise InputFileError(
            f"{path}: files names '{extra[0]}', which {reads} do{'es' if s else ''} not read; "
            "restore data.json or start a new run"
        )
    of_tokenizer = sorted(set(missing) - {str(f) for f in data_files(cfg.data)})
    tokenizer = text.is_text_spec(cfg.data)
    if of_tokenizer == missing and not twice and (gained := _made_since(missing, path)):
        # A file the tokenizer folder gained after data.json was written (its inode changed
        # later): data.json is intact, the folder is not (twenty-sixth round). Likewise a
        # data module's: a package dm/ or a dm.pyc put beside dm.py, which Python imports
        # instead (the fifty-third round: "restore data.json", which was never edited).
        where = (
            "the run's tokenizer folder"
            if tokenizer
            else f"the folder data '{cfg.data}' imports from"
        )
        raise InputFileError(
            f"{gained}: in {where} now, but made after the run started ({path} lists what "
            "it read); remove it or start a new run"
        )
    if missing or twice:
        wrong = (
            f"lacks '{missing[0]}', which {reads} read{s}"
            if missing
            else f"names '{twice[0]}' twice"
        )
        raise InputFileError(f"{path}: files {wrong}; restore data.json or start a new run")
    for file in record.files:
        # Checked as opened: a FIFO swapped in after a stat blocked the open forever.
        try:
            with open_input(Path(file.path), why="too large to read as the run's data") as f:
                now = handle_sha256(f)
        except OSError as exc:
            raise InputFileError(f"{file.path}: cannot read the run's data ({exc})") from None
        except InputFileError as exc:  # the record that names it, named (forty-ninth round)
            raise InputFileError(f"{exc} ({path} lists it as the run's data)") from None
        if now != file.sha256:
            raise InputFileError(
                f"{file.path}: changed since the run started (its sha256 in {path} is "
                f"{file.sha256[:16]}…, now {now[:16]}…); restore it or start a new run"
            )
    # The files are the run's: the names they give, numbered as the run numbers them, are
    # what the run trained with, so label_names edited in data.json (swapped, or one added)
    # are refused, not trusted.
    names = label_names(cfg)
    if record.label_names != names:
        if sorted(record.label_names or []) == sorted(names or []):
            # The same names in another order: data.json reordered, or the model folder's
            # config.json, whose id2label numbers them, edited since (named as its own).
            from executor.planning import check_model_config

            check_model_config(cfg)
        raise InputFileError(
            f"{path}: label_names {record.label_names} are not the names the run's data "
            f"'{cfg.data}' gives, in the order the run numbers them ({names}); restore "
            "data.json or start a new run"
        )


def _same_file(one: str, other: str) -> bool:
    """Whether the paths `one` and `other` lead to the same place now (links resolved)."""
    return os.path.realpath(one) == os.path.realpath(other)


def _run_folder(spec: str, listed: list[str], extra: str) -> Path | None:
    """The folder the run imported its data module `spec` from (the module's recorded file,
    `listed[0]`, up its package's depth), where `extra`, a file data.json lists that the
    module's folder here does not hold, is a .py file of that folder, and it is not the
    module's folder here (`module_root`); else None."""
    root = module_root(spec)
    if text.is_text_spec(spec) or root is None or not listed or not extra.endswith(".py"):
        return None
    module = Path(listed[0])
    target = spec.rpartition(":")[0]
    depth = target.count(".") + (1 if module.name == "__init__.py" else 0)
    if depth >= len(module.parents):
        return None
    then = module.parents[depth]
    moved = Path(os.path.realpath(then)) == root  # the same folder, through a link now
    return then if not moved and Path(extra).is_relative_to(then) else None


def check_helpers_kept(run_dir: Path, cfg: RunConfig) -> None:
    """A resume's, once its data is loaded: each helper data.json lists is, by its module's
    name, the module imported here (by where it leads). Found by the seventy-third round: a
    `path/to/mydata.py:load` run resumed from another directory imported that directory's
    `helper.py` (the working directory is where `import helper` looks) in place of the
    listed one, which was unchanged, so no check saw it, and trained on it, exit 0. A listed
    helper imported here under no name is held, too, to each shorter name it may have been
    imported by, from a folder of the run's on sys.path (the seventy-fifth round:
    `lib/helper.py`, imported as `helper` once the data put lib/ on sys.path, was looked for
    as `lib.helper`, and a PYTHONPATH's `helper` trained; the seventy-sixth: `pkg/utils.py`,
    never imported as `utils`, was refused for the project's own `utils.py`).
    InputFileError naming data.json and both files:

        check_helpers_kept(run_dir, cfg)   # after build_task, on --resume
    """
    record = read_data_record(run_dir)
    target = cfg.data.rpartition(":")[0]
    if record is None or text.is_text_spec(cfg.data) or not record.files or not target:
        return
    listed = [Path(file.path) for file in record.files]
    depth = 0 if names_a_file(target) else target.count(".")
    if not names_a_file(target) and listed[0].name == "__init__.py":
        depth += 1  # `pkg:load` in pkg/__init__.py: the folder holding pkg/ (`module_root`'s)
    if len(listed[0].parents) <= depth:
        return
    root = listed[0].parents[depth]  # the folder the run imported its data module from
    places = None
    for path in listed[1:]:
        if path.suffix != ".py" or root not in path.parents:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        names = [".".join(parts)]
        places = imported_places() if places is None else places
        if os.path.realpath(path) not in places:
            on_path = {os.path.realpath(entry) for entry in sys.path if type(entry) is str}
            names += [
                ".".join(parts[i:])
                for i in range(1, len(parts))
                if os.path.realpath(root.joinpath(*parts[:i])) in on_path
            ]
        for name in names:
            # here, or by the children the data's code forked (two may import two files of
            # one name: the listed one among them is the listed one imported)
            nows = imported_files(name)
            if nows and not any(_same_file(now, str(path)) for now in nows):
                now = nows[0]
                raise InputFileError(
                    f"{run_dir / DATA_RECORD}: the run's data module imported '{name}' from "
                    f"{path}, but here (in {Path.cwd()}) it imports {now}; run this command "
                    "from the directory the run was started from, with its PYTHONPATH, or "
                    "start a new run"
                )


def check_data_kept(run_dir: Path, manifest: CheckpointManifest, where: Path) -> None:
    """data.json still lists each file the checkpoint's manifest recorded it listing (`where`:
    the manifest), with the same sha256, and holds the facts it recorded. `check_data` holds
    data.json to the files; this holds it to the checkpoint, for what data.json alone cannot
    tell: a module of yours may be listed or not (`check_data` accepts any of your helpers),
    so a helper's entry deleted by hand, and the helper edited, resumed on the edited data
    with exit 0, and the next checkpoint recorded the edit (thirty-first round); and facts
    may be absent (a run prepared before them), so deleted by hand they switched
    `check_data_facts` off (fifty-seventh round). Files data.json lists beyond the
    manifest's are allowed: a rank's newly found module added to data.json just before a
    crash that kept the checkpoint from being written. A manifest without a field (written
    before it) holds nothing of it. InputFileError naming data.json, the checkpoint and the
    file or fact:

        check_data_kept(run_dir, manifest, manifest_path(run_dir, manifest))
    """
    path = run_dir / DATA_RECORD
    record = read_data_record(run_dir)
    listed = {file.path: file.sha256 for file in record.files} if record else {}
    for file in manifest.data or []:
        now = listed.get(file.path)
        if now == file.sha256:
            continue
        if now is None:
            raise InputFileError(
                f"{path}: files lacks '{file.path}', but checkpoint step-{manifest.step} "
                f"({where}) recorded it with sha256 {file.sha256[:16]}… as the run's data; "
                "data.json was edited since: restore data.json or start a new run"
            )
        # data.json's sha256 is the file's own (`check_data` hashed it first): the manifest
        # may be the one edited (the sixty-first round: "restore data.json", never edited).
        raise InputFileError(
            f"{path}: files gives '{file.path}' the sha256 {now[:16]}… (the file's now), but "
            f"checkpoint step-{manifest.step} ({where}) recorded it with sha256 "
            f"{file.sha256[:16]}… as the run's data; {ONE_EDITED}"
        )
    kept, facts = manifest.data_facts, record and record.facts
    if kept is None or facts == kept:
        return
    if facts is None and record:
        wrong = "lacks facts"
        said = ", ".join(_fact_words(kept, field) for field in list(FACT_WORDS)[:3])
        blame = "data.json was edited since: restore data.json or start a new run"
    elif facts is None:
        # No data.json: deleted, or never written (built-in data reads no file, and its
        # manifests hold no facts: the sixty-first round's were added by hand).
        wrong = "no such file"
        said = ", ".join(_fact_words(kept, field) for field in list(FACT_WORDS)[:3])
        blame = (
            "data.json was deleted or the checkpoint's manifest.json edited since the run "
            "wrote them: restore the edited one or start a new run"
        )
    else:
        # Two records of one fact, either of which a hand may have edited.
        field = next(f for f in FACT_WORDS if getattr(facts, f) != getattr(kept, f))
        wrong, said = f"facts give {_fact_words(facts, field)}", _fact_words(kept, field)
        blame = ONE_EDITED
    raise InputFileError(
        f"{path}: {wrong}, but checkpoint step-{manifest.step} ({where}) recorded {said} as "
        f"what the run's data gave; {blame}"
    )


# Where data.json and a checkpoint's manifest disagree and neither is proved the run's.
ONE_EDITED = (
    "data.json or the checkpoint's manifest.json was edited since the run wrote them: restore "
    "the edited one or start a new run"
)


def _fact_words(facts: DataFacts, field: str) -> str:
    """`_fact_words(facts, "train_samples")` → "384 training samples": one of the data's facts
    as `check_data_facts` says it."""
    value = getattr(facts, field)
    return "no classes (a causal LM)" if value is None else FACT_WORDS[field].format(value)


def label_names(cfg: RunConfig) -> list[str] | None:
    """The label names of the run's text data in the order of their ids, as the run numbers
    them (`models.label_order`: its model's config.json decides); None when the data names
    no labels. What data.json records.

        label_names(cfg)   # ["pos", "neg"] for names "neg", "pos" and a config saying so
    """
    if not text.is_text_spec(cfg.data):
        return None
    names = text.read_corpus(cfg.data, cfg.seed).label_names
    return None if names is None else models.label_order(cfg.model, names)


def _link_to_module(spec: str) -> Path | None:
    """The first link on the way from the folder `module:function` is imported from to its
    module's file (`pkg` of /home/me/pkg/sub.py, or mydata.py itself), None if none."""
    place = module_place(spec)
    if place is None:
        return None
    depth = spec.rpartition(":")[0].count(".") + (1 if place.name == "__init__.py" else 0)
    for step in reversed(place.parents[:depth]) if depth else ():
        if step.is_symlink():
            return step
    return place if place.is_symlink() else None


def check_data_module(path: Path, spec: str, listed: list[str], found: list[str]) -> None:
    """`module:function` data: the module this process imports (`found`, `read_files`) is the
    file data.json lists (`listed`). The same name found elsewhere, or not at all, is other
    data: a resume from another directory imported that directory's `mydata.py` and trained
    on it with exit 0 (the twenty-seventh round). InputFileError naming data.json, the
    module and both files.

        check_data_module(Path("runs/m/data.json"), "mydata:load", ["/a/mydata.py"], [])
    """
    module = spec.rpartition(":")[0]
    if text.is_text_spec(spec) or data_files(spec) or not listed or found == listed[:1]:
        return  # not the module form, or a list data.json's own checks name
    if found and _same_file(found[0], listed[0]) and not Path(listed[0]).is_symlink():
        # The run's folder moved and a link left where it was (`A -> A2`): the same file,
        # whose bytes data.json's sha256 checks (the seventy-first round: refused from
        # either folder, "run from the directory the run was started from").
        return
    recorded = Path(listed[0])
    if recorded.is_symlink() or (os.path.lexists(recorded) and not recorded.is_file()):
        # The file itself swapped since, here: a link (even to a copy), a FIFO or a folder
        # was "in the run's tokenizer folder", or "not found … run from the directory the
        # run was started from" (the fifty-first round).
        target = Path(os.path.realpath(recorded)) if recorded.is_symlink() else None  # a loop
        what = f"a link to {target}" if target and target.is_file() else "not a regular file"
        raise InputFileError(
            f"{recorded}: the run's data module '{module}' ({path} lists it), now {what}; "
            "put the file back or start a new run"
        )
    link = _link_to_module(spec)
    if link is not None and found:
        # The module is imported through a link here (itself, or its package's folder),
        # pointed elsewhere since (the sixty-ninth round: "restore data.json", which was
        # never edited): the link is named.
        raise InputFileError(
            f"{link}: the run's data module '{module}' ({path} lists {listed[0]}) is "
            f"imported through this link, now to {os.path.realpath(link)}; put the link "
            "back or start a new run"
        )
    root = module_root(spec)
    if root is not None and Path(listed[0]).is_relative_to(root):
        # From the folder the run started in: the module dropped from data.json or listed
        # after a helper (`helper_files`): data.json's own checks below name it.
        return
    here = found[0] if found else "not found"
    raise InputFileError(
        f"{path}: the run's data module '{module}' was {listed[0]}, but here (in {Path.cwd()}) "
        f"'{module}' is {here}; run this command from the directory the run was started "
        "from, with its PYTHONPATH, or start a new run"
    )


# --------------------------------------------------------------------------- the model out


def save_model(
    seq: LayerSequence,
    run_dir: Path,
    tokenizer: Any = None,
    check: Callable[[], None] | None = None,
) -> Path:
    """`runs/NAME/model/`: the sequence's weights as a transformers directory, with a text
    run's tokenizer (`export_tokenizer`). Rank 0 calls it after the final checkpoint, which
    gathered every layer's current values there; a resumed run replaces the directory once
    the new one is written and `check` (the rank's guard) passed:

        save_model(seq, run_dir, tokenizer, check=lambda: trainer.check_held("the trained model"))
    """
    out = run_dir / MODEL_DIR
    with stops_raised():  # SIGTERM too removes the partial `.tmp-model-PID/`, as Ctrl-C does
        # The run directory as it is, never made again.
        models.export(seq, out, parents=False, tokenizer=tokenizer, run_owned=True, verify=check)
    log.info("trained model: %s (transformers: from_pretrained)", out)
    return out


def export_tokenizer(cfg: RunConfig, seq: LayerSequence) -> Any:
    """The tokenizer a text run read, for its exported model to carry (`text.run_tokenizer`);
    None for other data (built-in, synthetic ids, `module:function`), exported as before."""
    if not text.is_text_spec(cfg.data):
        return None
    return text.run_tokenizer(cfg.tokenizer, seq, cfg.data)


# What the commands above the executor hold a run's records to besides (`runfiles.
# check_summary`: summary.json as the report builds it), called with (run_dir, config, records).
RecordsCheck = Callable[[Path, RunConfig, list], None]


def export_run(
    run_dir: str | Path,
    out: str | Path,
    checkpoint: str | None = None,
    check_files: RecordsCheck | None = None,
) -> Path:
    """`pipeplan export RUN [--checkpoint step-N] --out DIR`: a checkpoint's weights (the
    latest that verifies, or the named one) in the model the run builds, as a transformers
    directory. The run's data is read again: it sizes the head as it did in the run. Not
    while a run or resume trains it (`reading_run`). `check_files` holds the records to the
    files the analysis layer checks (the CLI and the API pass `runfiles.check_summary`).
    Notices (a torn last record, an older checkpoint) come only once it passes: a refusal
    after them was a second line (the twenty-seventh round).

        export_run("runs/exp1", "trained/", check_files=check_summary)
    """
    with reading_run(run_dir), held():
        return _export(run_dir, out, checkpoint, check_files)


def _newest_kept(run_dir: Path) -> CheckpointManifest | None:
    """The manifest of the run's newest kept checkpoint that reads (`kept_manifest`), or None."""
    from executor.checkpoint import checkpoints_written, kept_manifest

    for path in reversed(checkpoints_written(run_dir / "checkpoints")):
        if (manifest := kept_manifest(path)) is not None:
            return manifest
    return None


def _export(
    run_dir: str | Path, out: str | Path, checkpoint: str | None, check_files: RecordsCheck | None
) -> Path:
    from executor.checkpoint import (
        check_checkpoints_folder,
        check_position,
        check_trained_with,
        check_weights,
        load_checkpoint,
        load_latest,
        manifest_path,
        restore,
    )
    from executor.history import check_later_agrees, check_manifest_records, check_older_manifests
    from executor.planning import check_run_model
    from pipeplan.costmodel import check_priced_clusters
    from pipeplan.formats import check_priced_profiles, read_records
    from pipeplan.formats.metrics import check_eval_metrics

    run_dir, out = Path(run_dir), Path(out)
    _check_new_directory(out)
    cfg = read_run_config(run_dir)
    check_data(run_dir, cfg)
    check_checkpoints_folder(run_dir)  # --checkpoint step-N too, not only the latest
    path = _checkpoint_path(run_dir, checkpoint) if checkpoint is not None else None
    manifest, weights, _, _ = load_checkpoint(path) if path else load_latest(run_dir, "export")
    # data.json as the checkpoint saw it: a helper's entry deleted by hand passed `check_data`.
    check_data_kept(run_dir, manifest, manifest_path(run_dir, manifest))
    if path is not None and (newest := _newest_kept(run_dir)) and newest.step > manifest.step:
        # An older checkpoint's config.epochs above a later one's is its manifest's edit,
        # named as report, calibrate and resume name it: it was blamed on run.json, which
        # agrees with the later one (the sixty-fourth round).
        check_later_agrees(manifest, newest, run_dir)
    # run.json edited since (dropout, seq_len, precision…) would build another model around
    # the weights: refused as a resume refuses it.
    check_trained_with(manifest, cfg, run_dir / "run.json")
    # The model folder's config.json edited since the run (another activation) would build
    # another architecture around the weights: refused as a resume refuses it.
    check_run_model(run_dir, cfg)
    # Every weight comes from the checkpoint, the model directory's are not read.
    seq, data = build_task(cfg, quiet=True, from_checkpoint=True)
    # The data as a resume holds it to data.json's facts: a `module:function` whose classes or
    # lengths changed since (a file it reads that data.json does not list) built another head
    # (or epoch), and the checkpoint's weights were blamed for it (thirty-third round).
    record = read_data_record(run_dir)
    why = "the export builds the model the run trained, the head sized by its data"
    check_data_facts(
        record and record.facts, data_facts(data, seq), cfg.data, "the export", run_dir, why
    )
    # The manifest as a resume checks it (its layers, position and layout): a manifest resume
    # refuses is no checkpoint of this run to export either.
    where = manifest_path(run_dir, manifest)
    samples = length(data.train, data.name, "train")
    check_position(manifest, cfg, samples, seq.layers, where)
    # Its layout, phase and position against run.jsonl: export accepted a schedule edited in
    # the manifest that resume refused (twentieth round).
    records = read_records(run_dir / "run.jsonl", cfg)
    check_manifest_records(manifest, records, run_dir, cfg)
    # Every kept one before it, as resume does: its records, then its model's (its layers'
    # sums, its position), the model in hand (twenty-sixth round).

    def position(older: CheckpointManifest) -> None:
        where = manifest_path(run_dir, older)
        check_position(older, cfg, samples, seq.layers, where)
        # data.json as it saw it, as the one read: facts added to an older manifest of a
        # run of built-in data (no data.json) passed (the sixty-first round).
        check_data_kept(run_dir, older, where)

    check_older_manifests(manifest, records, run_dir, cfg, position)
    # The records against metrics.csv and summary.json, as resume, report and calibrate hold
    # them (twenty-third round): one command's refusal is every command's.
    check_eval_metrics(run_dir, records)
    # The profiles and the clusters its phases were priced with, as resume, report and
    # calibrate hold them: links edited alike in every record (forty-second round) are refused
    # by every command that reads the run.
    check_priced_clusters(run_dir, cfg, records, check_priced_profiles(run_dir, cfg, records))
    if check_files is not None:
        check_files(run_dir, cfg, records)
    # Shapes and dtype kinds, named as the checkpoint read (an older one after a fallback).
    check_weights(weights, seq.layers, path or manifest_path(run_dir, manifest).parent)
    try:
        restore(seq.layers, weights, {})
    except RuntimeError as exc:
        raise InputFileError(
            f"{run_dir}: the checkpoint does not fit the model the run builds now "
            f"({str(exc).splitlines()[0]}); did the model or the data change?"
        ) from None
    # The tokenizer data.json checked unchanged above (`check_data`): the export is a whole
    # from_pretrained directory, its words read as the run read them (thirty-eighth round).
    return models.export(seq, out, tokenizer=export_tokenizer(cfg, seq))


def _checkpoint_path(run_dir: Path, name: str) -> Path:
    # Any count of digits a file name holds: step-99999999999999999999 is no such checkpoint,
    # not a misnamed one (the thirty-second round).
    if not re.fullmatch(r"step-[0-9]{1,200}", name):
        raise BadArgumentError(f"--checkpoint {quoted(name)}: name a checkpoint as step-N")
    path = run_dir / "checkpoints" / name
    if not path.is_dir():
        kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))
        raise InputFileError(f"{path}: no such checkpoint (kept: {', '.join(kept) or 'none'})")
    return path


def _check_new_directory(out: Path) -> None:
    """Before any work: export writes a new directory (models.export checks it again)."""
    check_not_stdout(out, "--out", "directory")
    check_outside_runs(out)
    if (why := not_a_new_directory(out)) is not None:  # a device was "not an empty directory"
        raise OutputError(f"{out}: {why}; export needs a new one")


def read_run_config(run_dir: Path) -> RunConfig:
    """A run directory's run.json, for the commands given one (`run --resume`, torchrun's
    entry, `export`), after `check_run_directory`: the folder and its run.json checked as
    report and calibrate check them, with the same messages.

        cfg = read_run_config(Path("runs/exp1"))
    """
    return load(RunConfig, check_run_directory(run_dir, needs=("run.json",)) / "run.json")
