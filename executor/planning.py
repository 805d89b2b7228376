"""How a run chooses each phase's layout: from the plan file it was given, else by solving.

Rank 0 asks the `RunPlanner` whenever the freeze point moves. A plan file fixes the layout for
the freeze points it covers; a freeze point it does not cover (AutoFreeze decided differently)
is solved afresh with the same profile and cluster. Without a plan the cluster is this run's
ranks on one node, with the per-rank memory limit `--device-memory` (so a CPU run can be made to
need a pipeline the way a large model does on real GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from executor.parallel import PhaseChoice, PhaseSpec
from pipeplan.calibrate import run_cluster
from pipeplan.cluster import Cluster
from pipeplan.costmodel import CostModel
from pipeplan.errors import BadArgumentError
from pipeplan.plan import Plan, stage_plans
from pipeplan.records import RunConfig
from pipeplan.schema import Profile, load
from pipeplan.solver import Pins, solve_phase


def profiles_dir() -> Path:
    """The folder of shipped profiles: `profiles_dir() / "vit-digits@cpu-1t.json"`."""
    # Package data, not a path next to this file: an installed wheel has no checkout around it.
    # pip unpacks wheels, so the package is a real folder (zip imports are not supported).
    return Path(resources.files("profiles"))


def shipped_profile(model: str, device: str) -> Path | None:
    """`shipped_profile("vit-digits", "cpu")` → the profile measured with one thread per rank,
    or None when none ships for that model and device."""
    path = profiles_dir() / f"{model}@{device}-1t.json"
    return path if path.exists() else None


@dataclass
class RunPlanner:
    profile: Profile
    cluster: Cluster
    global_batch: int
    plan: Plan | None = None

    @classmethod
    def from_config(cls, cfg: RunConfig) -> RunPlanner:
        path = Path(cfg.profile) if cfg.profile else shipped_profile(cfg.model, cfg.device)
        if path is None:
            raise BadArgumentError(
                f"no shipped profile for {cfg.model} on {cfg.device}; run `pipeplan profile "
                f"{cfg.model} --out P.json --nproc {max(2, cfg.nproc)}` and pass --profile P.json"
            )
        profile = load(Profile, path)
        if profile.model.name != cfg.model:
            raise BadArgumentError(
                f"{path} profiles '{profile.model.name}', not the model '{cfg.model}' of this run"
            )
        plan = load(Plan, cfg.plan) if cfg.plan else None
        if plan is not None:
            check_plan(plan, profile, cfg)
            cluster = plan.inputs.cluster
        else:
            cluster = run_cluster(cfg, profile)
        return cls(profile, cluster, cfg.global_batch, plan)

    def check(self) -> None:
        """Fail before any process starts if not even the first phase can be planned."""
        self(0, False)

    def __call__(self, frozen_layers: int, cached: bool) -> PhaseChoice:
        if self.plan is not None:
            for phase in self.plan.phases:
                # The plan decides whether its phase reads the cache.
                if phase.frozen_layers == frozen_layers:
                    spec = PhaseSpec(
                        frozen_layers,
                        phase.cached,
                        tuple(phase.boundaries),
                        tuple(tuple(row) for row in phase.rank_map),
                        phase.micro_batches,
                        phase.schedule,
                    )
                    return PhaseChoice(spec, phase.micro_batch_size, phase.step_s, phase.stages)
        model = CostModel(self.profile, self.cluster)
        best = solve_phase(model, self.global_batch, frozen_layers, cached, Pins()).best
        layout = best.layout
        spec = PhaseSpec(
            frozen_layers,
            cached,
            tuple(layout.boundaries),
            tuple(tuple(row) for row in layout.rank_map),
            layout.micro_batches,
            layout.schedule,
        )
        return PhaseChoice(spec, layout.micro_batch_size, best.step_s, stage_plans(best.stages))


def check_plan(plan: Plan, profile: Profile, cfg: RunConfig) -> None:
    devices = plan.inputs.cluster.nodes * plan.inputs.cluster.devices_per_node
    if devices != cfg.nproc:
        raise BadArgumentError(f"the plan is for {devices} devices but --nproc is {cfg.nproc}")
    if plan.inputs.profile.model != cfg.model:
        raise BadArgumentError(
            f"the plan is for model '{plan.inputs.profile.model}', not '{cfg.model}'"
        )
    if plan.inputs.global_batch != cfg.global_batch:
        raise BadArgumentError(
            f"the plan is for global batch {plan.inputs.global_batch}, not {cfg.global_batch}"
        )
    if plan.inputs.profile.model != profile.model.name:
        raise BadArgumentError("the plan was made from another model's profile")
