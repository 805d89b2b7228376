"""Hostile inputs: random and mutated JSON never escape the loaders as anything but one line."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.checkpoint import CheckpointManifest
from executor.planning import shipped_profile
from pipeplan.cluster import Cluster
from pipeplan.errors import InputFileError
from pipeplan.formats import Profile, RunConfig, parse, read_records
from pipeplan.plan import Plan

PROFILE = json.loads(shipped_profile("bert-tiny", "cpu").read_text())
CLUSTER = {
    "schema_version": 1,
    "nodes": 2,
    "devices_per_node": 8,
    "device_memory_bytes": 1 << 34,
    "intra_node": {"bandwidth_bytes_per_s": 1.5e10, "latency_s": 5e-6},
    "inter_node": {"bandwidth_bytes_per_s": 5e9, "latency_s": 2e-5},
}
RUN = {
    "schema_version": 1,
    "name": "r",
    "model": "vit-digits",
    "data": "digits",
    "nproc": 2,
    "global_batch": 64,
    "epochs": 2,
}
MANIFEST = {
    "schema_version": 1,
    "step": 8,
    "epoch": 1,
    "step_in_epoch": 2,
    "phase": 1,
    "frozen_layers": 3,
    "grad_history": [{"0": 1.5}],
    "grad_norm_sums": {"4": 2.0},
    "grad_norm_steps": 2,
    "world_size": 2,
    "model": "vit-digits",
    "config": RUN,  # required: without it the check against run.json was off
}
VALID = {Profile: PROFILE, Cluster: CLUSTER, RunConfig: RUN, CheckpointManifest: MANIFEST}

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def paths(doc, prefix=()):
    """Every path to a value inside a JSON document."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from paths(value, (*prefix, index))


def mutate(doc, path, action, value):
    doc = json.loads(json.dumps(doc))
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif action == "nest":
        parent[path[-1]] = [[[[[[[[parent[path[-1]]]]]]]]]]
    else:
        parent[path[-1]] = value
    return doc


def expect_one_line_or_valid(model, text: str) -> None:
    try:
        parse(model, text, "fuzz.json")
    except InputFileError as exc:
        message = str(exc)
        assert message.startswith("fuzz.json") and "\n" not in message


@pytest.mark.parametrize(
    "model", [Profile, Cluster, Plan, RunConfig, CheckpointManifest], ids=lambda m: m.__name__
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values)
def test_random_json(model, value):
    expect_one_line_or_valid(model, json.dumps(value))
    expect_one_line_or_valid(model, json.dumps({"schema_version": 1, "x": value}))


@pytest.mark.parametrize("model", list(VALID), ids=lambda m: m.__name__)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_valid_documents(model, data):
    doc = VALID[model]
    path = data.draw(st.sampled_from(list(paths(doc))))
    action = data.draw(st.sampled_from(["replace", "delete", "nest"]))
    value = data.draw(json_values)
    expect_one_line_or_valid(model, json.dumps(mutate(doc, path, action, value)))


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_garbage_text(text):
    expect_one_line_or_valid(Profile, text)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(json_values, max_size=5))
def test_run_records(tmp_path, lines):
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    try:
        read_records(path)
    except InputFileError as exc:
        assert "\n" not in str(exc)


def expect_rejected(model, text: str, fragment: str) -> None:
    """A document that is certainly invalid: one line naming what is wrong, never accepted."""
    with pytest.raises(InputFileError) as err:
        parse(model, text, "fuzz.json")
    message = str(err.value)
    assert message.startswith("fuzz.json") and "\n" not in message
    assert fragment in message, message


def test_every_valid_document_is_accepted():
    for model, doc in VALID.items():
        parse(model, json.dumps(doc), "valid.json")


BANDWIDTH = "123456789.5"  # a marker value only the inter-node bandwidth holds
MARKED = json.dumps(
    {**CLUSTER, "inter_node": {**CLUSTER["inter_node"], "bandwidth_bytes_per_s": 123456789.5}}
)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[" * 50_000 + "]" * 50_000, "fuzz.json"),
        (json.dumps({**CLUSTER, "nodes": 10**400}), "nodes"),
        (json.dumps({**CLUSTER, "nodes": "2"}), "nodes"),
        (json.dumps({**CLUSTER, "nodes": 2.0}), "nodes"),
        (json.dumps({**CLUSTER, "schema_version": True}), "schema_version"),
        (json.dumps({**CLUSTER, "device_memory_bytes": -1}), "device_memory_bytes"),
        (json.dumps({**CLUSTER, "gpus": 8}), "gpus"),
        (MARKED.replace(BANDWIDTH, "NaN"), "NaN"),
        (MARKED.replace(BANDWIDTH, "Infinity"), "Infinity"),
        (MARKED.replace(BANDWIDTH, "1e400"), "out of range"),
    ],
    ids=[
        "nested 50,000 deep",
        "nodes 10**400",
        "nodes as a string",
        "nodes as a float",
        "version true",
        "negative memory",
        "unknown key",
        "NaN",
        "Infinity",
        "1e400",
    ],
)
def test_certainly_invalid_documents_are_rejected(text, fragment):
    assert MARKED.count(BANDWIDTH) == 1  # the replacements above reach exactly one number
    expect_rejected(Cluster if text.startswith("{") else Profile, text, fragment)
