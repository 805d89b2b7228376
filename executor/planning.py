"""How a run chooses each phase's layout: from the plan file it was given, else by solving.

Rank 0 asks the `RunPlanner` whenever the freeze point moves. A plan file fixes the freeze
schedule the run follows and the layout of each of its freeze points: every one is a phase of
the plan. Without a plan each phase is decided with the run's profile by the plan's own rule
(`pipeplan.plan.decide_phase`: cached or not, and a move only when it pays for itself over
the epochs left), and the cluster is this run's
ranks on the nodes they run on (`pipeplan.cluster.run_cluster`: one node for `pipeplan run`,
torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE under torchrun), with the per-rank memory limit
`--device-memory` (so a CPU run can be made to need a pipeline the way a large model does on
real GPUs).

Every decision carries its `Pricing`: the profile file in the run directory (`profile.json`
as the run started, `calibration-N.json` once the run has recalibrated itself), its sha256, the
cluster and the `Horizon` it weighed, so any phase can be re-planned from the run directory
alone (docs/architecture.md §6).

    planner = RunPlanner.for_run(run_dir, cfg)   # on rank 0 of a run
    horizon = Horizon(samples=6400, epochs=3, previous=decision.layout, cache=True)
    decision = planner(frozen_layers=3, horizon=horizon)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from pipeplan import freeze, models
from pipeplan.cluster import (
    HostRanks,
    default_links,
    default_links_warning,
    format_bytes,
    rank_memory,
    run_cluster,
)
from pipeplan.costmodel import CostModel, check_profile
from pipeplan.errors import BadArgumentError, InputFileError
from pipeplan.fileio import CALIBRATION_FILE, write_atomic
from pipeplan.formats import (
    RUN_PLAN,
    Cluster,
    Horizon,
    PhaseDecision,
    PhaseRecord,
    Plan,
    PlanInputs,
    Precision,
    Pricing,
    Profile,
    ProfileIdentity,
    RunConfig,
    check_run_profile,
    dumps,
    load,
    read_plan_copy,
)
from pipeplan.formats.base import (
    MAX_GENERATION_CONFIG_BYTES,
    first_difference,
    read_input,
    text_sha256,
)
from pipeplan.formats.cluster import DEFAULT_CACHE_BUDGET_BYTES
from pipeplan.formats.presets import config_path
from pipeplan.formats.profile import (
    FedInput,
    input_mismatch,
    model_mismatch,
    named_by_name,
    profile_command,
)
from pipeplan.formats.run import EDITED_SINCE
from pipeplan.plan import (
    TrainingShape,
    check_plan_prices,
    decide_phase,
    profile_identity,
    stage_plans,
)
from pipeplan.solver import Pins

if TYPE_CHECKING:
    from pipeplan.models import LayerSequence

RUN_PROFILE = "profile.json"  # the profile a run started with, copied into its directory


def profiles_dir() -> Path:
    """The folder of shipped profiles: `profiles_dir() / "vit-digits@cpu-1t.json"`."""
    # Package data, not a path next to this file: an installed wheel has no checkout around it.
    # pip unpacks wheels, so the package is a real folder (zip imports are not supported).
    return Path(resources.files("profiles"))


def shipped_profile(model: str, device: str, precision: str = "fp32") -> Path | None:
    """`shipped_profile("vit-digits", "cpu")` → the profile measured with one thread per rank,
    or None when none ships for that model, device and precision (`MODEL@cpu-1t.json` is
    fp32; a bf16 one would be `MODEL@cpu-1t-bf16.json`). Profiles ship for built-in names
    only: a MODEL that is a path (`./bert-tiny`, `bert-tiny/`, `/data/bert-tiny`) is a folder
    by `config_path`'s rule, never the built-in. Found by the twenty-eighth round: the name was
    joined to the profiles' folder, so `./bert-tiny` got the built-in's profile (refused for
    the folder's hidden_size; planned with it had the shapes agreed) while `bert-tiny/` got
    none, and `/data/bert-tiny` would have read a `/data/bert-tiny@cpu-1t.json` as shipped."""
    if config_path(model) is not None:
        return None
    suffix = "" if precision == "fp32" else f"-{precision}"
    path = profiles_dir() / f"{model}@{device}-1t{suffix}.json"
    return path if path.exists() else None


def shipped_precision(identity: ProfileIdentity, model: str, device: str) -> str | None:
    """The precision whose shipped profile of `model` on `device` is the one a plan was made
    from (`identity`, the plan's record of it), or None if neither is: a run of that plan
    without `--profile` prices with that profile, so it trains in that precision.

        shipped_precision(load(Plan, "p.json").inputs.profile, "vit-digits", "cpu")  # "bf16"
    """
    for precision in get_args(Precision):
        path = shipped_profile(model, device, precision)
        if path is not None and profile_identity(load(Profile, path)).sha256 == identity.sha256:
            return precision
    return None


def config_profile(cfg: RunConfig, seq: LayerSequence | None = None) -> Profile:
    """The profile a run configuration names (`--profile`, else the shipped one). Without one,
    the line says how to measure it, for the input `seq` takes when given: the hint without
    --seq-len and --task made a profile the same run then refused (twenty-sixth round)."""
    path = (
        Path(cfg.profile) if cfg.profile else shipped_profile(cfg.model, cfg.device, cfg.precision)
    )
    if path is None:
        precision = "" if cfg.precision == "fp32" else f" in {cfg.precision}"
        flags = _profile_flags(seq, cfg) if seq is not None else _precision_flag(cfg)
        folder = " (a path names a model folder: profiles ship for built-in names only)"
        if cfg.plan is not None:
            # A plan is priced with one profile: a new one was refused next as another (the
            # fifty-ninth round), so the plan's own is what to pass.
            raise BadArgumentError(
                f"no shipped profile for {cfg.model} on {cfg.device}{precision}"
                f"{folder if config_path(cfg.model) is not None else ''}; pass the profile "
                f"the plan {cfg.plan} was made from with --profile (its inputs.profile names "
                "it by sha256)"
            )
        raise BadArgumentError(
            f"no shipped profile for {cfg.model} on {cfg.device}{precision}"
            f"{folder if config_path(cfg.model) is not None else ''}; run "
            f"`{profile_command(cfg.model, flags, cfg.nproc)}` and pass --profile P.json"
        )
    profile = load(Profile, path)
    check_profile(profile, str(path))
    # The advice measures the input the run feeds too: a profile of the folder alone was
    # refused next for its input (a second refusal after following the first).
    flags = _profile_flags(seq, cfg) if seq is not None else _precision_flag(cfg)
    # Beside --plan a new profile needs a new plan (`_replan`): profiling alone was refused
    # next as another profile than the plan's (the sixty-eighth round).
    why = model_mismatch(cfg.model, profile, flags, nproc=cfg.nproc)
    if why is not None:
        measures = cfg.plan is not None and not named_by_name(cfg.model)  # a folder's command
        raise BadArgumentError(f"{path} {why}" + (f", {_replan(cfg)}" if measures else ""))
    if profile.device.kind != cfg.device:  # CPU times and host memory say nothing of a GPU
        raise BadArgumentError(
            f"{path} was measured on {profile.device.kind}, but this run trains on "
            f"{cfg.device}; profile on {cfg.device}: "
            f"{profile_command(cfg.model, f'{flags} --device {cfg.device}', cfg.nproc)}"
            + (f", {_replan(cfg)}" if cfg.plan is not None else "")
        )
    return profile


def check_run_model(run_dir: Path, cfg: RunConfig) -> None:
    """The model folder run.json names still builds the model the run trained: its config.json
    holds the shape fields of the run's copy of its profile (`check_run_profile`). Edited
    since (activation_function relu for gelu_new), an export wrote the trained weights under
    another architecture with exit 0 (nineteenth round) where a resume refused: the one check
    of `run --resume` and `export`. InputFileError naming the field.

        check_run_model(Path("runs/exp1"), load(RunConfig, "runs/exp1/run.json"))

    Any edit to the folder's config.json since the run was prepared (run.json's
    `model_config_sha256`: dropout or layer_norm_eps, which no shape shows) is refused too.
    """
    check_model_config(cfg)
    profile = load(Profile, run_dir / RUN_PROFILE)
    check_run_profile(run_dir, cfg, profile, f"its {RUN_PROFILE}", EDITED_SINCE)


def model_config_sha256(model: str) -> str | None:
    """sha256 of the bytes of `model`'s config.json (a model folder's); None for a built-in."""
    path = models.config_path(model)
    return None if path is None else text_sha256(read_input(path))  # its bytes: UTF-8 JSON


def generation_config_sha256(model: str) -> str | None:
    """sha256 of the bytes of `model`'s generation_config.json, of no bytes when the folder has
    none (`RunConfig.generation_config_sha256`); None for a built-in."""
    path = models.generation_config_path(model)
    if path is None:
        return None
    there = path.exists() or path.is_symlink()  # a dangling link: read_input names it
    return text_sha256(read_input(path, MAX_GENERATION_CONFIG_BYTES) if there else "")


def model_files_sha256(cfg: RunConfig) -> RunConfig:
    """`cfg` with the sha256s of the model folder's files a resume and an export read again
    (config.json, generation_config.json), as the run is prepared."""
    return cfg.model_copy(
        update={
            "model_config_sha256": model_config_sha256(cfg.model),
            "generation_config_sha256": generation_config_sha256(cfg.model),
        }
    )


def check_model_config(cfg: RunConfig) -> None:
    """The model folder's config.json and generation_config.json are the ones the run was
    prepared with (their sha256s in run.json); InputFileError naming the file otherwise. A run
    prepared before a sha256 was recorded has none: only config.json's shape fields are held
    (`check_run_profile`)."""
    recorded = [
        (models.config_path(cfg.model), cfg.model_config_sha256, model_config_sha256),
        (
            models.generation_config_path(cfg.model),
            cfg.generation_config_sha256,
            generation_config_sha256,
        ),
    ]
    for path, expected, digest_of in recorded:
        if expected is None:
            continue
        digest = digest_of(cfg.model)
        if digest == expected:
            continue
        empty = text_sha256("")
        if expected == empty:
            what = "made since the run started (the folder had none)"
        elif digest == empty:
            what = "deleted since the run started"
        else:
            what = (
                f"edited since the run started (its sha256 is {str(digest)[:12]}…, run.json "
                f"recorded {expected[:12]}…)"
            )
        raise InputFileError(
            f"{path}: {what}; the run builds its model from it: restore it or start a new run"
        )


def check_profile_fits(
    profile: Profile, seq: LayerSequence, cfg: RunConfig, plan: Plan | None = None
) -> None:
    """A profile times one input shape and one head: a run that feeds another (a longer
    sequence, padded text, another task) or builds a head of other outputs would be planned
    with times and memory that do not hold for it (`profile.input_mismatch`, which calibrate
    holds a run's profile to as well). The model itself is `model_mismatch`'s
    (`config_profile`). Where run flags alone make the run feed the profile's input
    (`_matching_flags`: --seq-len 16), the line names them first; a new profile is the other
    remedy, and beside a `plan` (the run's --plan) with the re-plan it then needs
    (`_replan`): found by the sixty-eighth round, a run of a plan made from a profile at
    --seq-len 16 was told to profile at 64, whose profile the plan then refused as another,
    and neither line named --seq-len 16."""
    named = _profile_named(cfg)
    fed = fed_input(seq, cfg)
    why = input_mismatch(profile, fed, named, "this run")
    if why is None:
        return
    command = profile_command(cfg.model, _profile_flags(seq, cfg), cfg.nproc)
    remedy = f"profile that: {command}, and pass --profile P.json"
    if cfg.plan is not None:
        remedy = f"profile that: {command}, {_replan(cfg, plan)}"
    flags, matched = _matching_flags(FedInput.of_profile(profile), fed)
    if flags and input_mismatch(profile, matched, named, "this run") is None:
        remedy = f"give {flags} to match {named}, or {remedy}"
    raise BadArgumentError(f"{why}; {remedy}")


def _matching_flags(have: FedInput, fed: FedInput) -> tuple[str, FedInput]:
    """The `pipeplan run` flags that change the input `fed` where it differs from the
    profile's (`have`) in what they set, and the input the run then feeds: `(" --seq-len 16",
    fed with have's shape)`. --seq-len sets a text model's sequence length (the model is the
    profile's: `config_profile` held it), --precision the precision; whatever else differs
    (padding, the task and its head) follows from the data, so is left to the caller's
    check of the input returned."""
    flags = ""
    if fed.dtype == have.dtype == "int64" and fed.shape != have.shape:
        flags += f" --seq-len {have.shape[0]}"
        fed = replace(fed, shape=have.shape)
    if fed.precision != have.precision:
        flags += f" --precision {have.precision}"
        fed = replace(fed, precision=have.precision)
    return flags.strip(), fed


def _replan(cfg: RunConfig, plan: Plan | None = None) -> str:
    """The re-plan a new profile needs beside --plan (`check_plan` refuses a plan made from
    another profile), as the run's --plan (`plan` when read already) was made, for the epochs
    and batch the run is held to (`replan_flags`): `then re-plan with it …: pipeplan plan
    --profile P.json --nodes 1 … --out P-plan.json, and pass --profile P.json --plan
    P-plan.json`."""
    assert cfg.plan is not None
    inputs = (plan if plan is not None else load(Plan, cfg.plan)).inputs
    command = f"pipeplan plan --profile P.json {replan_flags(inputs, cfg)} --out P-plan.json"
    return (
        f"then re-plan with it as {cfg.plan} was made (a plan is priced with one profile): "
        f"{command}, and pass --profile P.json --plan P-plan.json"
    )


# The `pipeplan plan` flag of each pin a plan records (`PlanInputs.pinned`); the replica count
# is pinned by the plan's own comparisons, never by a flag.
PIN_FLAGS = {
    "num_stages": "--stages",
    "micro_batches": "--micro-batches",
    "schedule": "--schedule",
    "boundaries": "--boundaries",
}


def replan_flags(inputs: PlanInputs, cfg: RunConfig) -> str:
    """The `pipeplan plan` flags that plan again what `inputs` planned, for the epochs and
    global batch of the run `cfg`: the cluster's devices and memory, its cache budget, the
    samples, the freeze schedule, the cache and the pins. The links are left to the new
    profile (measured there, as the first plan's were, or its defaults). Found open by the
    forty-eighth session: the re-plan a profile mismatch suggested dropped the plan's freeze
    schedule and pins, and planned another run.

        replan_flags(plan.inputs, cfg)
        # "--nodes 1 --devices-per-node 2 --device-memory 100MiB --epochs 3 --global-batch 32
        # --samples 1438 --freeze-schedule 0,2,2 --stages 2"
    """
    cluster, freeze = inputs.cluster, inputs.freeze
    flags = [
        f"--nodes {cluster.nodes} --devices-per-node {cluster.devices_per_node}",
        f"--device-memory {format_bytes(cluster.device_memory_bytes)}",
        f"--epochs {cfg.epochs} --global-batch {cfg.global_batch} --samples {inputs.samples}",
    ]
    if cluster.cache_budget_bytes != DEFAULT_CACHE_BUDGET_BYTES:
        flags.append(f"--cache-budget {format_bytes(cluster.cache_budget_bytes)}")
    if freeze.source in ("list", "trajectory"):
        flags.append("--freeze-schedule " + ",".join(map(str, freeze.frozen_layers)))
    elif freeze.source == "none":
        flags.append("--freeze none")
    else:  # the α bound, or the earliest AutoFreeze freezes under it
        flags.append(f"--freeze {'auto' if freeze.source == 'autofreeze' else 'alpha'}")
        flags.append(f"--alpha {freeze.alpha!r}")
    if not inputs.cache:
        flags.append("--no-cache")
    for key, flag in PIN_FLAGS.items():
        value = inputs.pinned.get(key)
        if value is not None:
            flags.append(
                f"{flag} {','.join(map(str, value)) if isinstance(value, list) else value}"
            )
    return " ".join(flags)


def fed_input(seq: LayerSequence, cfg: RunConfig) -> FedInput:
    """The input the model `seq` takes and the head it has, in `cfg`'s precision."""
    dtype = str(seq.input_dtype).removeprefix("torch.")
    head = sum(p.numel() for p in seq.layers[-1].parameters())
    shape = tuple(seq.input_shape)
    return FedInput(shape, dtype, cfg.precision, seq.task, seq.padding_mask, seq.num_labels, head)


def _profile_flags(seq: LayerSequence, cfg: RunConfig) -> str:
    """The `pipeplan profile` flags that time the input `seq` takes, and the head it has, in
    `cfg`'s precision: ` --seq-len 16 --task classification --num-labels 5 --padding-mask`
    (--num-labels where the data's labels are not the model's own)."""
    return fed_input(seq, cfg).flags(models.config_labels(cfg.model))


def _profile_named(cfg: RunConfig) -> str:
    """The profile a run prices with, as the user named it: --profile, or the shipped one."""
    shipped = shipped_profile(cfg.model, cfg.device, cfg.precision)
    return cfg.profile or f"the shipped profile {shipped}"


def _precision_flag(cfg: RunConfig) -> str:
    return f" --precision {cfg.precision}" if cfg.precision != "fp32" else ""


@dataclass
class RunPlanner:
    profile: Profile
    profile_file: str  # the profile's file in the run directory (Pricing.profile)
    online: bool  # whether `profile` was fitted during this run
    config: RunConfig
    plan: Plan | None = None
    # The ranks that share this host, which --device-memory is held to (`run_cluster`);
    # None: all of --nproc (`pipeplan run`).
    host: HostRanks | None = None

    @classmethod
    def from_config(
        cls, cfg: RunConfig, seq: LayerSequence | None = None, host: HostRanks | None = None
    ) -> RunPlanner:
        """Before the run directory exists: the profile the configuration names (for the
        input of `seq`, the model built, `config_profile`). `host` as `RunPlanner.host`."""
        profile = config_profile(cfg, seq)
        plan = load(Plan, cfg.plan) if cfg.plan else None
        if plan is not None:
            check_plan(plan, profile, cfg, cfg.plan)
        return cls(profile, RUN_PROFILE, False, cfg, plan, host)

    @classmethod
    def for_run(cls, run_dir: Path, cfg: RunConfig, host: HostRanks | None = None) -> RunPlanner:
        """Inside a run: the profile and plan copied into the run directory when it was
        prepared, never the files run.json names (edited or gone since, they are not what the
        run planned with). `host` as `RunPlanner.host`."""
        profile = load(Profile, run_dir / RUN_PROFILE)
        plan = read_plan_copy(run_dir, cfg)  # gone or edited since: refused
        if plan is not None:  # the copy edited by hand is held to the run as the file was
            check_plan(plan, profile, cfg, run_dir / RUN_PLAN, copied=True)
        return cls(profile, RUN_PROFILE, False, cfg, plan, host)

    def check_records(self, run_dir: Path, phases: list[PhaseRecord]) -> None:
        """The run's copy of its plan (RUN_PLAN) gives every phase the records say it took from
        the plan: edited by hand since (another layout, the same schedule), a resume would
        switch layout mid-run and no longer continue exactly. InputFileError naming the
        first phase that differs.

            planner.check_records(run_dir, [r for r in records if isinstance(r, PhaseRecord)])
        """
        if self.plan is None:
            return
        planned = {p.layout.frozen_layers: p.layout for p in self.plan.phases}
        for record in phases:
            if record.pricing.source != "plan":
                continue
            layout = planned.get(record.layout.frozen_layers)
            if layout is None:
                why = f"it has no phase freezing {record.layout.frozen_layers} layers"
            elif (differs := first_difference(record.layout, layout)) is not None:
                # The field, not the labels: two layouts may share one label.
                field, recorded, plan = differs
                why = f"the layout it recorded has {field} {recorded}, the plan's {plan}"
            else:
                continue
            raise InputFileError(
                f"{run_dir / RUN_PLAN}: edited since the run took its phase {record.phase} "
                f"from it ({why}); restore it or start a new run"
            )

    @property
    def cluster(self) -> Cluster:
        if self.plan is not None:
            return self.plan.inputs.cluster
        return run_cluster(self.config, self.profile, self.host)

    def links_warning(self, seq: LayerSequence) -> str | None:
        """Where a run without a plan prices its ranks' links on the format's defaults (its
        profile measured none: `cluster.default_links`), one line saying so and how to
        measure them for the input `seq` takes; else None (one rank in a node, a plan's
        links, measured or calibrated ones)."""
        cfg = self.config
        if self.plan is not None or self.cluster.devices_per_node == 1:
            return None
        ranks = self.cluster.devices_per_node
        links = default_links(self.profile, [(ranks, 1), (1, ranks)])
        if not links:
            return None
        command = profile_command(cfg.model, _profile_flags(seq, cfg), ranks)
        measure = f"measure them: `{command}`, and pass --profile P.json"
        return default_links_warning(_profile_named(cfg), links, measure)

    def check(self, seq: LayerSequence | None = None) -> None:
        """Fail before any process starts if the profile was measured for another input than
        the model `seq` takes, or if not even the first phase can be planned."""
        if seq is not None:
            check_profile_fits(self.profile, seq, self.config, self.plan)
        cfg = self.config
        # The freeze point the run starts at (a plan's schedule may start frozen); the block
        # count matters only to later decisions, not to `first`.
        first = freeze.AutoFreeze(cfg.freeze, 0, cfg.alpha, list(cfg.freeze_list or [])).first
        horizon = Horizon(samples=cfg.global_batch, epochs=cfg.epochs, previous=None, cache=False)
        self(first, horizon)

    def adopt(self, profile: Profile, run_dir: Path) -> None:
        """Plan from now on with `profile`, fitted during the run: written to the run
        directory first, so every phase it prices can be re-planned from there. Numbered
        after the run's last one: a resumed run's fit never replaces a file its earlier
        phases were priced with (their records hold its sha256)."""
        name = f"calibration-{last_calibration(run_dir) + 1}.json"
        write_atomic(run_dir / name, dumps(profile))
        self.profile, self.profile_file, self.online = profile, name, True

    def continue_with(self, run_dir: Path, name: str) -> None:
        """A resume plans on with the run's profile `name` (profile.json, or the
        calibration-N.json its checkpoint's phase was priced with), as the run did before it
        stopped.

            planner.continue_with(run_dir, "calibration-2.json")
        """
        if name != self.profile_file:
            self.profile = load(Profile, run_dir / name)
            self.profile_file, self.online = name, name != RUN_PROFILE

    def pricing(self, source: str, horizon: Horizon | None = None) -> Pricing:
        calibration = "online" if self.online else "profile" if self.profile.calibration else "none"
        return Pricing(
            source=source,
            profile=self.profile_file,
            profile_sha256=profile_identity(self.profile).sha256,
            calibration=calibration,
            cluster=self.cluster,
            horizon=horizon,
        )

    def __call__(self, frozen_layers: int, horizon: Horizon) -> PhaseDecision:
        if self.plan is not None:
            for phase in self.plan.phases:
                # The plan decides whether its phase reads the cache.
                if phase.layout.frozen_layers == frozen_layers:
                    return PhaseDecision(
                        layout=phase.layout,
                        predicted_step_s=phase.step_s,
                        predicted_stages=phase.stages,
                        pricing=self.pricing("plan"),
                    )
            # A run of a plan follows the plan's schedule (`check_plan`), whose every freeze
            # point is a phase (`Plan._phases_follow_schedule`): no freeze point is left to
            # solve, and solving one would run a layout the plan never chose.
            points = ", ".join(str(p.layout.frozen_layers) for p in self.plan.phases)
            raise BadArgumentError(
                f"{self.config.plan}: the run reached {frozen_layers} frozen layers, which no "
                f"phase of the plan freezes (its phases freeze {points})"
            )
        pricing = self.pricing("solver", horizon)
        return _decide(self.profile, pricing, self.config.global_batch, frozen_layers)


def last_calibration(run_dir: Path) -> int:
    """The number of the run's last `calibration-N.json` (0 before its first)."""
    found = (CALIBRATION_FILE.fullmatch(p.name) for p in run_dir.iterdir())
    return max((int(m.group(1)) for m in found if m), default=0)


def _decide(profile: Profile, pricing: Pricing, global_batch: int, frozen: int) -> PhaseDecision:
    """The plan's rule for one phase (`pipeplan.plan.decide_phase`) over `pricing.horizon`."""
    horizon = pricing.horizon
    assert horizon is not None
    model = CostModel(profile, pricing.cluster)
    shape = TrainingShape(global_batch, horizon.samples, horizon.epochs)
    choice = decide_phase(
        model, shape, frozen, horizon.epochs, horizon.cache, Pins(), horizon.previous
    )
    return PhaseDecision(
        layout=choice.layout,
        predicted_step_s=choice.steady.step_s,
        predicted_stages=stage_plans(choice.steady.stages),
        pricing=pricing,
    )


def replan(run_dir: Path, decision: PhaseDecision, global_batch: int) -> PhaseDecision:
    """Price a recorded phase again from the run directory alone: its profile file (checked
    against the recorded sha256), its cluster and its horizon. The decision is deterministic,
    so a phase the run decided comes out with the same layout."""
    pricing = decision.pricing
    if pricing.horizon is None:
        raise BadArgumentError("this phase came from a plan file: its layout is the plan's")
    profile = load(Profile, run_dir / pricing.profile)
    if profile_identity(profile).sha256 != pricing.profile_sha256:
        raise BadArgumentError(
            f"{run_dir / pricing.profile}: sha256 differs from what the phase record names"
        )
    return _decide(profile, pricing, global_batch, decision.layout.frozen_layers)


def _check_identity(plan: Plan, identity: ProfileIdentity, where: str | Path = "the plan") -> None:
    """The plan's inputs.profile names the profile its sha256 is of: a model or device edited
    beside the same sha256 contradicts it (seventeenth round: a device of "Other CPU" ran)."""
    for field in ("model", "device"):
        recorded, actual = getattr(plan.inputs.profile, field), getattr(identity, field)
        if recorded != actual:
            raise BadArgumentError(
                f"{where}: inputs.profile.{field} is {recorded!r} but the profile of its "
                f"sha256 has {actual!r}; the plan was edited: re-plan"
            )


# What a resume of a plan's run is told where --epochs or --nproc differ from the plan's: it
# said "re-plan with --epochs 5", and --resume then refused --plan (the fifty-ninth round).
PLAN_FIXED = (
    "; a run of a plan trains the plan's epochs on its devices, which --resume cannot change: "
    "start a new run with a plan made for them"
)


def check_plan(
    plan: Plan, profile: Profile, cfg: RunConfig, where: str | Path, copied: bool = False
) -> None:
    """`check_plan(plan, profile, cfg, "plan.json")`: the plan `where` (the --plan file, or a
    run's copy of it: `copied`) was made for this run (`cfg`) from `profile`, and its phases
    are what their layouts price to (`check_plan_prices`); BadArgumentError otherwise."""
    devices = plan.inputs.cluster.num_devices
    if devices != cfg.nproc:
        raise BadArgumentError(
            f"{where}: the plan is for {devices} devices (inputs.cluster) but --nproc is "
            f"{cfg.nproc}" + (PLAN_FIXED if copied else "")
        )
    # Held to the run's profile, which is the run's model's (`config_profile`: a folder is its
    # config, whatever its spelling): compared with --model as typed, a plan of a folder
    # profiled as `./gpt2` passed the launcher (the same spelling) and failed every rank,
    # whose run.json holds the absolute path, after the run folder was made (the
    # thirty-fifth round); any other spelling was refused.
    if plan.inputs.profile.model != profile.model.name:
        raise BadArgumentError(
            f"{where}: the plan is for model '{plan.inputs.profile.model}' "
            f"(inputs.profile.model), but the run's profile is of '{profile.model.name}': "
            "pass the profile the plan was made from with --profile, or re-plan with this one"
        )
    if plan.inputs.epochs != cfg.epochs:
        # A plan's phases tile its epochs: fewer cut its schedule where it never said to stop
        # (a freeze planned for epoch 5 of 10 never came), more train epochs it has no phase for.
        advice = PLAN_FIXED if copied else f": re-plan with --epochs {cfg.epochs}"
        raise BadArgumentError(
            f"{where}: the plan is for {plan.inputs.epochs} epochs, not --epochs {cfg.epochs}; "
            f"its phases cover exactly its epochs{advice}"
        )
    if plan.inputs.global_batch != cfg.global_batch:
        raise BadArgumentError(  # the file, its field and what to do (52nd round)
            f"{where}: the plan is for global batch {plan.inputs.global_batch} "
            f"(inputs.global_batch), not --global-batch {cfg.global_batch}: give "
            f"--global-batch {plan.inputs.global_batch}, or re-plan with --global-batch "
            f"{cfg.global_batch}"
        )
    if plan.inputs.profile.sha256 != profile_identity(profile).sha256:
        raise BadArgumentError(  # the file and its field named (forty-eighth round)
            f"{where}: the plan was made from another profile (its inputs.profile.sha256 "
            "differs from the run's profile's); pass the plan's profile with --profile or "
            "re-plan"
        )
    _check_identity(plan, profile_identity(profile), where)
    # A rank has no more memory than the run would plan it with itself (`rank_memory`: the
    # profiled device's share, never more than this host's; --device-memory is refused beside
    # --plan): the plan's node is a host whose memory its devices share (a local run is one
    # node: `check_plan_nodes`). A plan that gave each device more (--device-memory, a CPU
    # host's whole memory per device as plans did before the twenty-ninth round, or a profile
    # of a larger host: the thirty-second) chose layouts the ranks may not hold.
    cluster = plan.inputs.cluster
    planned, per_node = cluster.device_memory_bytes, cluster.devices_per_node
    has, source = rank_memory(cfg, profile, per_node, "--devices-per-node")
    if planned > has:
        # Re-planning without --device-memory is no advice where this host is the limit: the
        # profile would plan for its larger host again.
        raise BadArgumentError(
            f"{where}: the plan gives each device {planned} bytes "
            f"(inputs.cluster.device_memory_bytes), more than each of a node's {per_node} "
            f"ranks has here: {has} bytes ({source}); re-plan with --device-memory "
            f"{format_bytes(max(has >> 20 << 20, 1))} or less"  # whole MiB, as a user types
        )
    num_layers = len(profile.layers)
    for i, phase in enumerate(plan.phases):
        try:
            phase.layout.check(num_layers, devices)
        except BadArgumentError as exc:
            raise BadArgumentError(f"the plan's phase {i} cannot run: {exc}") from None
    # `with_file_values` takes these from the plan and the flags are refused beside --plan: a
    # run.json edited by hand (or a RunConfig built without them) must still agree, since
    # the run freezes and caches by them and takes each freeze point's layout from a phase.
    schedule = list(plan.inputs.freeze.frozen_layers)
    if cfg.freeze != "list" or cfg.freeze_list != schedule:
        given = ",".join(map(str, cfg.freeze_list)) if cfg.freeze == "list" else cfg.freeze
        raise BadArgumentError(
            f"the run freezes by {given}, but the plan's phases follow the freeze schedule "
            f"{','.join(map(str, schedule))}; a run of a plan follows its schedule"
        )
    if cfg.cache != plan.inputs.cache:
        raise BadArgumentError(
            f"the run's cache is {'on' if cfg.cache else 'off'}, but the plan was made with it "
            f"{'on' if plan.inputs.cache else 'off'}; a run of a plan keeps the plan's cache"
        )
    budget = plan.inputs.cluster.cache_budget_bytes
    if cfg.cache_budget_bytes != budget:
        raise BadArgumentError(
            f"the run's cache budget is {cfg.cache_budget_bytes} bytes, but the plan's cluster "
            f"has {budget}; a run of a plan keeps the plan's cache budget"
        )
    # Last: priced only once the plan is known to be this run's, from this run's profile.
    check_plan_prices(plan, profile, str(where))


def check_plan_cache(plan: Plan, cache: bool, why: str) -> None:
    """A plan whose phase reads the activation cache needs a run that keeps one: its stage 0
    skips the frozen layers (run with --no-cache, it got raw inputs and failed in a rank)."""
    cached = next((i for i, phase in enumerate(plan.phases) if phase.layout.cached), None)
    if not cache and cached is not None:
        raise BadArgumentError(
            f"the plan's phase {cached} reads the activation cache, which this run does not "
            f"keep ({why}); plan with --no-cache"
        )
