"""File-format loading: every problem is one line naming the field."""

import copy
import json

import pytest

from pipeplan import formats
from pipeplan.errors import InputFileError

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
        layers.append({**copy.deepcopy(LAYER), "index": i, "name": kind, "kind": kind})
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
        (mutate("schema_version", KeyError), "schema_version None"),
        (mutate("layers.1.params", -5), "layers.1.params"),
        (mutate("layers.1.params", "many"), "layers.1.params"),
        (mutate("layers.1.kind", "decoder"), "layers.1.kind"),
        (mutate("device", KeyError), "'device'"),
        (mutate("layers.0.index", 3), "indexed"),
        (mutate("surprise", 1), "surprise"),
        (mutate("layers.0.timings.0.fwd_s", KeyError), "fwd_s"),
        (mutate("layers.0.timings.0.bwd_s", 1e400), "not valid JSON"),
        (json.dumps(minimal_profile()).replace('"fwd_s": 0.1', '"fwd_s": NaN', 1), "NaN"),
    ],
)
def test_bad_profiles_give_one_line_naming_the_problem(text, fragment):
    with pytest.raises(InputFileError) as err:
        formats.parse(formats.Profile, text, "p.json")
    message = str(err.value)
    assert fragment in message and "\n" not in message and message.startswith("p.json")


def with_comm(**comm) -> str:
    """A profile with measured links (and `comm`'s fields on top)."""
    fit = {"latency_s": 1e-5, "bandwidth_bytes_per_s": 1e9, "samples": []}
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
