"""File-format loading: every problem is one line naming the field."""

import copy
import json
import re

import pytest

from pipeplan import formats
from pipeplan.errors import BadArgumentError, InputFileError

LAYER = {
    "index": 0,
    "name": "embeddings",
    "kind": "embeddings",
    "params": 10,
    "param_bytes": 40,
    "out_bytes_per_sample": 8,
    "saved_bytes_per_sample": 0.0,
    "timings": [
        {"micro_batch": 1, "fwd_s": 0.1, "bwd_s": 0.2, "fwd_nograd_s": 0.1},
    ],
}


def minimal_profile() -> dict:
    layers = []
    for i, kind in enumerate(["embeddings", "block", "head"]):
        name = f"block{i}" if kind == "block" else kind  # as pipeplan names layers
        layers.append({**copy.deepcopy(LAYER), "index": i, "name": name, "kind": kind})
    return {
        "schema_version": 1,
        "created_at": "2026-11-29T00:00:00+00:00",
        "model": {
            "name": "m",
            "family": "bert",
            "config": {},
            "input_shape": [8],
            "input_dtype": "int64",
            "num_labels": 2,
        },
        "device": {
            "kind": "cpu",
            "name": "cpu",
            "memory_bytes": 1,
            "threads": 1,
            "torch_version": "x",
            "transformers_version": "y",
            "python_version": "3.11",
            "hostname": "h",
        },
        "settings": {"micro_batches": [1], "warmup": 0, "repeats": 1, "seed": 0},
        "layers": layers,
    }


def test_minimal_profile_loads():
    prof = formats.parse(formats.Profile, json.dumps(minimal_profile()))
    assert prof.comm is None and len(prof.layers) == 3


def mutate(path: str, value) -> str:
    data = minimal_profile()
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{", "not valid JSON"),
        ("[]", "JSON object"),
        (mutate("schema_version", 2), "schema_version 2"),
        (mutate("schema_version", KeyError), "profile has no schema_version; every pipeplan"),
        (mutate("layers.1.params", -5), "layers.1.params"),
        (mutate("layers.1.params", "many"), "layers.1.params"),
        (mutate("layers.1.kind", "decoder"), "layers.1.kind"),
        (mutate("device", KeyError), "'device'"),
        (mutate("layers.0.index", 3), "indexed"),
        (mutate("surprise", 1), "surprise"),
        (mutate("layers.0.timings.0.fwd_s", KeyError), "fwd_s"),
        (mutate("layers.0.timings.0.bwd_s", 1e400), "not valid JSON"),
        (json.dumps(minimal_profile()).replace('"fwd_s": 0.1', '"fwd_s": NaN', 1), "NaN"),
        # The seventy-seventh round: a lone surrogate's escape, valid JSON of no text, was
        # pydantic's "unexpected end of hex escape", naming no field.
        (
            mutate("model", "bert\ud800"),
            "p.json: not valid JSON (model holds \\ud800, an unpaired surrogate, not text)",
        ),
        (
            mutate("layers.1.name", "x\udfff"),
            "(layers[1].name holds \\udfff, an unpaired surrogate, not text)",
        ),
    ],
)
def test_bad_profiles_give_one_line_naming_the_problem(text, fragment):
    with pytest.raises(InputFileError) as err:
        formats.parse(formats.Profile, text, "p.json")
    message = str(err.value)
    assert fragment in message and "\n" not in message and message.startswith("p.json")


@pytest.mark.parametrize("name", sorted(formats.SCHEMAS))
def test_every_format_requires_its_schema_version_as_its_schema_says(name):
    """Found by the twenty-fifth round: a cluster file without schema_version was refused as
    "cluster schema_version None is not supported" while `pipeplan schema cluster` stated a
    default of 1. For every format the schema and the loader agree: the key is required (no
    default in the schema, nested versioned documents' too) and a file without it is refused
    as missing it, not as the value None."""
    model = formats.SCHEMAS[name]
    schema = formats.json_schema(name)
    versioned = [schema, *(d for d in schema.get("$defs", {}).values() if _versioned(d))]
    for document in versioned:
        assert "schema_version" in document["required"]
        assert "default" not in document["properties"]["schema_version"]
    with pytest.raises(InputFileError) as err:
        formats.parse(model, "{}", "f.json")
    kind = formats.base.kind_of(model)
    expected = formats.schema_version(model)
    said = f"f.json: {kind} has no schema_version; every pipeplan file states its version "
    assert str(err.value) == said + f"(this pipeplan reads {expected})"


def _versioned(schema: dict) -> bool:
    return "schema_version" in schema.get("properties", {})


def test_a_nested_document_without_its_schema_version_is_refused(tmp_path):
    """Found by the twenty-fifth round (the nested side of the rule above): a plan's cluster
    and a checkpoint manifest's run configuration without schema_version were read as the
    default version. They are required there too; the one line names the nested field."""
    from test_hostile import _manifest_file

    import cli
    from executor.planning import shipped_profile

    out = tmp_path / "plan.json"
    argv = ["plan", "--profile", str(shipped_profile("bert-tiny", "cpu")), "--out", str(out)]
    assert cli.main([*argv, "--devices-per-node", "2", "--samples", "1400"]) == 0
    manifest = _manifest_file(tmp_path / "manifest.json")
    cases = [
        (formats.Plan, out, ("inputs", "cluster"), "cluster has no schema_version"),
        (formats.CheckpointManifest, manifest, ("config",), "run config has no schema_version"),
    ]
    for model, path, where, said in cases:
        doc = json.loads(path.read_text())
        formats.parse(model, json.dumps(doc), str(path))  # as written: read
        node = doc
        for key in where:
            node = node[key]
        del node["schema_version"]
        with pytest.raises(InputFileError) as err:
            formats.parse(model, json.dumps(doc), str(path))
        assert f"field '{'.'.join(where)}': {said}" in str(err.value)
        assert "\n" not in str(err.value)


def with_comm(**comm) -> str:
    """A profile with measured links (and `comm`'s fields on top)."""
    # A fit carries the (at least two) samples it was fitted from.
    samples = [{"bytes": b, "time_s": 1e-5 + b / 1e9, "spread_s": 0.0} for b in (4096, 1 << 20)]
    fit = {"latency_s": 1e-5, "bandwidth_bytes_per_s": 1e9, "samples": samples}
    data = minimal_profile()
    data["comm"] = {"backend": "gloo", "nproc": 2, "p2p": fit, "allreduce": fit, **comm}
    return json.dumps(data)


def test_the_group_rebuild_is_optional_and_strict():
    """Profiles from before it was measured load without it (None: the cost model's 2 s
    default); a measured one must be a finite, bounded number of seconds, not a string."""
    assert formats.parse(formats.Profile, with_comm()).comm.group_rebuild_s is None
    parsed = formats.parse(formats.Profile, with_comm(group_rebuild_s=0.0047))
    assert parsed.comm.group_rebuild_s == 0.0047
    for bad in ('"0.3"', "-0.1", "2e6", "true", "NaN"):
        text = with_comm(group_rebuild_s=0.5).replace("0.5", bad)
        with pytest.raises(InputFileError) as err:
            formats.parse(formats.Profile, text, "p.json")
        message = str(err.value)
        assert "\n" not in message and ("group_rebuild_s" in message or "NaN" in message)


def test_deep_nesting_is_an_input_error():
    with pytest.raises(InputFileError):
        formats.parse(formats.Profile, "[" * 100000 + "]" * 100000)


def test_missing_file(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        formats.load(formats.Profile, tmp_path / "nope.json")


def layout(frozen: int, boundaries: tuple[int, ...], cached=False, M=2, schedule="1f1b"):
    ranks = (tuple(range(len(boundaries) - 1)),)
    return formats.Layout(
        frozen_layers=frozen,
        cached=cached,
        micro_batches=M,
        micro_batch_size=4,
        schedule=schedule,
        boundaries=boundaries,
        rank_map=ranks,
    )


@pytest.mark.parametrize(
    ("frozen", "boundaries", "k"),
    [
        (0, (0, 2, 10), 0),
        (5, (0, 6, 10), 0),
        (5, (0, 5, 10), 1),
        (5, (0, 4, 10), 1),
        (5, (0, 2, 4, 10), 2),
        (5, (0, 2, 5, 10), 2),
        (9, (0, 3, 6, 9, 10), 3),
    ],
)
def test_forward_only_stages_are_the_leading_stages_with_every_layer_frozen(frozen, boundaries, k):
    assert layout(frozen, boundaries, M=4).forward_only_stages == k
    layout(frozen, boundaries, M=4).check(10, 4)  # the executor runs them (uncached)


def test_a_cached_layout_reads_the_cache_in_a_stage_that_trains():
    layout(5, (0, 6, 10), cached=True).check(10, 2)
    with pytest.raises(BadArgumentError, match="cached layout's stage 0 must hold a layer"):
        layout(5, (0, 5, 10), cached=True).check(10, 2)


def test_a_replicas_stages_run_on_increasing_ranks():
    """Found by the eighteenth round: a plan phase with rank_map [[1, 0]] passed every check
    (`Layout.check` did not hold the rule), trained two epochs, then died in rank 1 with
    "ValueError: pipeline ranks must increase with the stage index". The one layout check holds
    it now, and the executor's topology applies the same function."""
    from executor.topology import build_topology

    swapped = layout(0, (0, 5, 10)).model_copy(update={"rank_map": ((1, 0),)})
    with pytest.raises(BadArgumentError, match=r"rank_map \[\[1, 0\]\]: replica 0's stages"):
        swapped.check(10, 2)
    two = layout(0, (0, 5, 10)).model_copy(update={"rank_map": ((0, 1), (3, 2))})
    with pytest.raises(BadArgumentError, match="replica 1's stages are on ranks \\[3, 2\\]"):
        two.check(10, 4)
    # Before any process group is made: the rank's one line, not a torch error.
    with pytest.raises(BadArgumentError, match="increasing ranks"):
        build_topology(0, ((1, 0),))
    # Increasing but not consecutive (leftover devices of other nodes) is a placement it runs.
    layout(0, (0, 5, 10)).model_copy(update={"rank_map": ((0, 3), (1, 2))}).check(10, 4)


def test_1f1b_needs_a_micro_batch_per_stage_that_trains():
    # 3 stages, the first forward-only: torch's 1F1B runs the other 2, so M = 2 is enough.
    layout(3, (0, 2, 6, 10), M=2).check(10, 3)
    with pytest.raises(BadArgumentError, match="1 micro-batches for 2 stages that train"):
        layout(3, (0, 2, 6, 10), M=1).check(10, 3)
    with pytest.raises(BadArgumentError, match="2 micro-batches for 3 stages that train"):
        layout(0, (0, 2, 6, 10), M=2).check(10, 3)
    layout(0, (0, 2, 6, 10), M=1, schedule="gpipe").check(10, 3)  # GPipe runs any M


def test_a_layout_label_says_how_many_stages_run_forward_only():
    from pipeplan.formats import Layout

    fields = dict(micro_batches=4, micro_batch_size=2, schedule="gpipe", rank_map=((0, 1, 2),))
    fed = Layout(frozen_layers=3, cached=False, boundaries=(0, 2, 5, 14), **fields)
    assert fed.label() == "3x1 M=4 gpipe (1 forward-only)"
    plain = Layout(frozen_layers=1, cached=False, boundaries=(0, 2, 5, 14), **fields)
    assert plain.label() == "3x1 M=4 gpipe"


# --------------------------------------------------------------------------- printable strings


def _strings_lacking(model: type, seen: set, check) -> list[str]:
    """Every field of `model` (and the models inside it, keys of its dicts too) that takes a
    str whose annotations (`metadata`) `check` finds wanting."""
    import typing

    from pydantic import BaseModel

    def walk(tp, where: str, metadata=()) -> list[str]:
        if typing.get_origin(tp) is typing.Annotated:
            return walk(tp.__origin__, where, (*metadata, *tp.__metadata__))
        if tp is str:
            return [] if check(metadata) else [where]
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return []
            seen.add(tp)
            return [
                found
                for name, info in tp.model_fields.items()
                for found in walk(info.annotation, f"{tp.__name__}.{name}", tuple(info.metadata))
            ]
        if typing.get_origin(tp) is typing.Literal:
            return []
        return [found for arg in typing.get_args(tp) for found in walk(arg, where)]

    return walk(model, model.__name__)


def _any_of(metadata, funcs: tuple) -> bool:
    """A validator of `funcs` (an AfterValidator's func) or a pattern among `metadata`."""
    return any(getattr(m, "func", None) in funcs or getattr(m, "pattern", None) for m in metadata)


def _unchecked_strings(model: type, seen: set) -> list[str]:
    """Every field of `model` (and the models inside it) that takes a str with neither the
    `Text` check (`printable`) nor a pattern: where a control character could get through."""
    from pipeplan.formats.base import printable

    return _strings_lacking(model, seen, lambda metadata: _any_of(metadata, (printable,)))


# Strings that are data, not names pipeplan prints on a line: label names come from the user's
# data, normalised by `executor.text` (a label may hold any text the data does); a model's
# config is transformers' own dictionary, kept exactly (its sha256 is the profile's identity).
DATA_STRINGS = {"DataRecord.label_names", "ModelInfo.config"}


def test_every_string_a_format_holds_is_printable():
    """Found by the fifteenth round: a profile's model.name 'bert-tiny\\npipeplan: error:
    fake' printed a forged error line in preview's title. Every name-like string of every
    format is `Text` (no control characters), so no file pipeplan reads can break a line."""
    seen: set = set()
    unchecked = {
        found for model in formats.SCHEMAS.values() for found in _unchecked_strings(model, seen)
    }
    assert unchecked - DATA_STRINGS == set()


def _unbounded_strings(model: type, seen: set) -> list[str]:
    """Every field of `model` (and the models inside it, keys of its dicts too) that takes a
    str with no length limit: neither `short` (`Text`, `DataText`) nor a pattern."""
    from pipeplan.formats.base import short, short_data

    return _strings_lacking(model, seen, lambda metadata: _any_of(metadata, (short, short_data)))


def test_every_string_a_file_holds_is_bounded():
    """Found by the nineteenth round: a cluster's name of 900,000 characters was copied into
    the plan, while a profile's text stops at 4096 characters; a run record's grad_norms key of
    5,000 digits raised int()'s traceback. Every string of every file pipeplan reads (each
    kind, a run.jsonl record, a freeze trajectory) is bounded, keys too, but a model's config:
    transformers' own dictionary, kept exactly and checked by `modelconfig`."""
    from pipeplan.formats.freeze import TrajectoryFile

    read = [*formats.SCHEMAS.values(), formats.PhaseRecord, formats.StepRecord]
    read += [formats.EpochRecord, TrajectoryFile]
    seen: set = set()
    unbounded = {found for model in read for found in _unbounded_strings(model, seen)}
    assert unbounded == {"ModelInfo.config"}


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ({"model": "m" * 4097}, "field 'model': is 4097 characters long; a name, path or version"),
        ({"model": "m" * 4096}, None),
        ({"name": "x" * 4000}, "field 'name': 'xxxxxxxxxxxxxxxxxxxx'… (4000 characters): use"),
        (
            {"data": "d" * 8194},
            "field 'data': is 8194 characters long; a data spec is at most 8193",
        ),
        ({"data": ",".join(["/" + "d" * 4088 + ".jsonl"] * 2)}, None),  # TRAIN,EVAL files
    ],
    ids=["model 4097", "model 4096", "run name 4000", "data 8194", "data of two paths of 4095"],
)
def test_a_run_configurations_text_is_bounded(doc, fragment):
    """Found by the nineteenth round (the same limit for every format): a name or path is at
    most 4096 characters, a data spec (TRAIN,EVAL, each recorded absolute) at most two paths'
    worth, and a run name refused is not echoed whole (4,000 characters on one line)."""
    text = json.dumps({"schema_version": 1, "model": "vit-digits", "data": "digits", **doc})
    if fragment is None:
        assert formats.parse(formats.RunConfig, text, "run.json")
        return
    with pytest.raises(InputFileError, match=re.escape(fragment)):
        formats.parse(formats.RunConfig, text, "run.json")


@pytest.mark.parametrize("char", ["\n", "\r", "\x1b", "\x00", "\x85", "\u2028", "\u2029"])
def test_a_control_character_in_a_name_is_refused_naming_the_field(char):
    """Found by the fifteenth round: a name holding a line break forged a line of output;
    C0 and C1 controls and the line and paragraph separators are refused by name."""
    doc = minimal_profile()
    doc["layers"][1]["name"] = f"block{char}pipeplan: error: fake"
    with pytest.raises(InputFileError, match=r"layers\.1\.name.*control character") as exc:
        formats.parse(formats.Profile, json.dumps(doc), "p.json")
    assert len(str(exc.value).splitlines()) == 1


@pytest.mark.parametrize(
    "char", ["\u061c", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069", "\u200b",
             "\u200d", "\u2060", "\ufeff"]
)  # fmt: skip
def test_a_bidi_or_zero_width_character_in_a_name_is_refused_naming_the_field(char):
    """Found by the sixteenth round: a model.name ending in U+202E was kept in the plan and
    printed the rest of its line reversed; a zero-width space hides in a name. Both print as
    another name, so they are refused like control characters."""
    doc = minimal_profile()
    doc["layers"][1]["name"] = f"block{char}1"
    with pytest.raises(InputFileError, match=rf"layers\.1\.name.*U\+{ord(char):04X}") as exc:
        formats.parse(formats.Profile, json.dumps(doc), "p.json")
    assert len(str(exc.value).splitlines()) == 1


def test_names_of_any_script_are_still_names():
    """Only control characters are refused: accents, other scripts and spaces are names."""
    doc = minimal_profile()
    doc["model"]["name"] = "/modèles/БЕРТ 小"
    assert formats.parse(formats.Profile, json.dumps(doc)).model.name == "/modèles/БЕРТ 小"


def test_an_accuracy_and_a_calibrated_rate_are_held_as_their_kind_are():
    """Found by the fifty-eighth round: a run summary's final_eval_accuracy took -0.137 and
    5e-324 (only the cross-check against the records caught them), and a profile's
    calibration took a subnormal optimizer_s_per_byte, where every calibrated time refuses
    one. An accuracy is a fraction; the rate is never subnormal."""
    from pydantic import ValidationError

    from pipeplan.formats.profile import Calibration
    from pipeplan.formats.run import RunSummary

    summary = {"name": "a", "total_s": 1.0, "steps": 1, "phases": []}
    for bad in (-0.137, 1.5):
        with pytest.raises(ValidationError, match="final_eval_accuracy"):
            RunSummary.model_validate({**summary, "final_eval_accuracy": bad})
    assert RunSummary.model_validate({**summary, "final_eval_accuracy": 1.0})
    with pytest.raises(ValidationError, match="optimizer_s_per_byte"):
        Calibration.model_validate({"optimizer_s_per_byte": 5e-324})
