"""File formats: a pydantic model for everything pipeplan reads or writes, each with a
`schema_version` (docs/architecture.md §3). The bottom layer: it imports nothing of pipeplan
but `pipeplan.errors`.

    from pipeplan.formats import Plan, load, dumps
    plan = load(Plan, "plan.json")

`SCHEMAS` is the registry `pipeplan schema NAME` prints from, written out here in full.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from pipeplan.errors import PipeplanError, quoted
from pipeplan.formats.base import (
    FILE_LIMITS,
    KINDS,
    MAX_PHASED_JSON_BYTES,
    MAX_SMALL_JSON_BYTES,
    NOT_A_FLAG,
    Flag,
    Needs,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    Strict,
    dumps,
    flag_marker,
    flag_of,
    load,
    parse,
    schema_version,
)
from pipeplan.formats.checkpoint import CheckpointManifest
from pipeplan.formats.cluster import Cluster, Link
from pipeplan.formats.freeze import FreezePhase, FreezeSchedule, TrajectoryFile
from pipeplan.formats.layout import SCHEDULES, Layout, Schedule
from pipeplan.formats.plan import (
    AblationRow,
    EpochRow,
    FreezeCase,
    PhasePlan,
    Plan,
    PlanInputs,
    Preview,
    ProfileIdentity,
    ScoredLayout,
    StagePlan,
    StaticPlanSummary,
)
from pipeplan.formats.profile import (
    DEFAULT_GROUP_REBUILD_S,
    PRECISION_DTYPE,
    Calibration,
    CommProfile,
    DeviceInfo,
    FittedLink,
    FittedShape,
    LayerProfile,
    LinkFit,
    LinkSample,
    MicroBatchTiming,
    ModelInfo,
    Precision,
    Profile,
    ProfileSettings,
    Task,
)
from pipeplan.formats.report import (
    BaselineReport,
    Comparison,
    EpochReport,
    PhaseReport,
    RankBreakdown,
    Report,
    StageReport,
)
from pipeplan.formats.run import (
    RUN_PLAN,
    STEP_RECORDS,
    WARMUP_STEPS_PER_PHASE,
    DataFacts,
    DataFile,
    DataRecord,
    EpochRecord,
    Forecast,
    ForecastCase,
    FreezeMode,
    Horizon,
    Init,
    PhaseDecision,
    PhaseRecord,
    PhaseSummary,
    Pricing,
    RankRow,
    RankTimes,
    RunConfig,
    RunSummary,
    StepRecord,
    StepRow,
    check_priced_profiles,
    check_run_profile,
    read_plan_copy,
    read_records,
    steady_step,
    steady_steps,
)

SCHEMAS: dict[str, type[BaseModel]] = {
    "profile": Profile,
    "cluster": Cluster,
    "plan": Plan,
    "run": RunConfig,
    "summary": RunSummary,
    "report": Report,
    "checkpoint": CheckpointManifest,
    "data": DataRecord,
}


# What `parse` calls each kind of file in its messages ("…: not a plan (it is a profile)").
KINDS.update(
    {
        Profile: "profile",
        Cluster: "cluster",
        Plan: "plan",
        RunConfig: "run configuration",
        RunSummary: "run summary",
        Report: "report",
        CheckpointManifest: "checkpoint manifest",
        DataRecord: "data record",
        # Both are a freeze trajectory file (written out whole, or its frozen_layers alone):
        # given for a profile or cluster, neither was named (the fifty-third round).
        FreezeSchedule: "freeze trajectory",
        TrajectoryFile: "freeze trajectory",
    }
)


# Each kind's largest file (`load` refuses a larger one unread): small ones of a few fields,
# and those that grow with a run's phases or decisions; the others (a profile of 4,096 blocks,
# a data record) take `MAX_JSON_BYTES`.
FILE_LIMITS.update(
    dict.fromkeys((Cluster, RunConfig, FreezeSchedule, TrajectoryFile), MAX_SMALL_JSON_BYTES)
)
FILE_LIMITS.update(
    dict.fromkeys((Plan, RunSummary, Report, CheckpointManifest), MAX_PHASED_JSON_BYTES)
)


def json_schema(name: str) -> dict[str, Any]:
    if name not in SCHEMAS:
        raise PipeplanError(f"unknown schema {quoted(name)}; known: {', '.join(sorted(SCHEMAS))}")
    return SCHEMAS[name].model_json_schema()


__all__ = [
    "DEFAULT_GROUP_REBUILD_S",
    "NOT_A_FLAG",
    "PRECISION_DTYPE",
    "RUN_PLAN",
    "SCHEDULES",
    "SCHEMAS",
    "STEP_RECORDS",
    "WARMUP_STEPS_PER_PHASE",
    "AblationRow",
    "BaselineReport",
    "Calibration",
    "CheckpointManifest",
    "Cluster",
    "CommProfile",
    "Comparison",
    "DataFacts",
    "DataFile",
    "DataRecord",
    "DeviceInfo",
    "EpochRecord",
    "EpochReport",
    "EpochRow",
    "FittedLink",
    "FittedShape",
    "Flag",
    "Forecast",
    "ForecastCase",
    "FreezeCase",
    "FreezeMode",
    "FreezePhase",
    "FreezeSchedule",
    "Horizon",
    "Init",
    "LayerProfile",
    "Layout",
    "Link",
    "LinkFit",
    "LinkSample",
    "MicroBatchTiming",
    "ModelInfo",
    "Needs",
    "NonNegFloat",
    "NonNegInt",
    "PhaseDecision",
    "PhasePlan",
    "PhaseRecord",
    "PhaseReport",
    "PhaseSummary",
    "Plan",
    "PlanInputs",
    "PosFloat",
    "PosInt",
    "Precision",
    "Preview",
    "Pricing",
    "ProfileIdentity",
    "ProfileSettings",
    "RankBreakdown",
    "RankRow",
    "RankTimes",
    "Report",
    "RunConfig",
    "RunSummary",
    "Schedule",
    "ScoredLayout",
    "StagePlan",
    "StageReport",
    "StaticPlanSummary",
    "StepRecord",
    "StepRow",
    "Strict",
    "Task",
    "check_priced_profiles",
    "check_run_profile",
    "dumps",
    "flag_marker",
    "flag_of",
    "json_schema",
    "load",
    "parse",
    "read_plan_copy",
    "read_records",
    "schema_version",
    "steady_step",
    "steady_steps",
]
