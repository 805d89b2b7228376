"""AutoCache (executor.cache): exact storage in memory and spill file, versions, release."""

import json

import pytest
import torch

from executor.cache import AUGMENTATION_REASON, ActivationCache, cache_allowed

N = 10
SHAPE = (3, 4)


def make(tmp_path, *, budget_rows, shape=SHAPE, dtype=torch.float32, block_rows=2, n=N):
    row_bytes = torch.Size(shape).numel() * dtype.itemsize
    return ActivationCache(
        n, shape, dtype, budget_rows * row_bytes, tmp_path, block_bytes=block_rows * row_bytes
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, so NaN payloads and -0.0 compare exactly."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def sample_values(n, shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn((n, *shape), generator=g).to(dtype)
    flat = v.view(-1)
    flat[:4] = torch.tensor([float("nan"), float("inf"), -0.0, float("-inf")]).to(dtype)
    return v


def spill_files(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_store_lookup_bit_exact_in_memory_and_spilled(tmp_path, dtype):
    cache = make(tmp_path, budget_rows=4, dtype=dtype)
    cache.advance(1, None)
    assert cache.memory_rows == 4
    x = sample_values(N, SHAPE, dtype)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    cache.store(order[:6], x[order[:6]], 1)
    cache.store(order[6:], x[order[6:]], 1)
    assert cache.filled == N
    assert spill_files(tmp_path) == ["cache-v1.bin"]
    row_bytes = x[0].nbytes
    assert cache.resident_bytes == 4 * row_bytes
    assert cache.spilled_bytes == 6 * row_bytes

    query = torch.tensor([9, 0, 5, 3, 4, 7, 1, 8, 2, 6])
    values, mask = cache.lookup(query)
    assert mask.all() and mask.dtype == torch.bool
    assert values.dtype == dtype and values.shape == (N, *SHAPE)
    assert same_bits(values, x[query])
    assert torch.equal(values[4:], x[query][4:])  # no special values there: plain equality too
    # each region separately
    assert same_bits(cache.lookup(torch.arange(4))[0], x[:4])
    assert same_bits(cache.lookup(torch.arange(4, N))[0], x[4:])


def test_partial_fill_mask_and_overwrite(tmp_path):
    cache = make(tmp_path, budget_rows=5)
    _, mask = cache.lookup(torch.arange(N))
    assert not mask.any()  # version 0 holds nothing
    cache.advance(2, None)
    x = sample_values(N, SHAPE, torch.float32)
    stored = torch.tensor([1, 4, 6, 9])
    cache.store(stored, x[stored], 2)
    assert cache.filled == 4

    query = torch.tensor([0, 1, 1, 9, 5, 6, 4, 8])  # repeats allowed in lookups
    values, mask = cache.lookup(query)
    assert mask.tolist() == [False, True, True, True, False, True, True, False]
    assert same_bits(values[mask], x[query[mask]])

    y = x + 1
    cache.store(torch.tensor([4, 7]), y[[4, 7]], 2)  # 4 overwritten, 7 new
    assert cache.filled == 5
    values, mask = cache.lookup(torch.tensor([4, 7, 1]))
    assert mask.all()
    assert torch.equal(values, torch.stack([y[4], y[7], x[1]]))
    assert cache.manifest()["filled_in_memory"] == 2 and cache.manifest()["filled_spilled"] == 3


def test_store_rejects_stale_version_and_bad_input(tmp_path):
    cache = make(tmp_path, budget_rows=5)
    x = sample_values(N, SHAPE, torch.float32)
    with pytest.raises(ValueError, match="nothing is frozen"):
        cache.store(torch.arange(2), x[:2], 0)
    cache.advance(3, None)
    with pytest.raises(ValueError, match="stale producer"):
        cache.store(torch.arange(2), x[:2], 2)
    with pytest.raises(ValueError, match="stale producer"):
        cache.store(torch.arange(2), x[:2], 4)
    with pytest.raises(ValueError, match="repeat"):
        cache.store(torch.tensor([1, 1]), x[:2], 3)
    with pytest.raises(IndexError):
        cache.lookup(torch.tensor([N]))
    with pytest.raises(ValueError, match="does not match"):
        cache.store(torch.arange(3), x[:2], 3)
    cache.store(torch.arange(2), x[:2], 3)
    with pytest.raises(ValueError, match="holds"):
        cache.store(torch.tensor([5]), x[:1].double(), 3)  # no silent dtype conversion
    assert cache.filled == 2


def test_empty_version_takes_layout_of_first_store(tmp_path):
    cache = make(tmp_path, budget_rows=5)
    cache.advance(1, None)
    v = torch.randn(2, 7, dtype=torch.float16)
    cache.store(torch.tensor([0, 8]), v, 1)
    assert cache.sample_shape == (7,) and cache.dtype == torch.float16
    assert torch.equal(cache.lookup(torch.tensor([0, 8]))[0], v)


def test_advance_must_grow(tmp_path):
    cache = make(tmp_path, budget_rows=5)
    cache.advance(2, None)
    for bad in (2, 1, 0):
        with pytest.raises(ValueError, match="must grow"):
            cache.advance(bad, None)
    assert cache.frozen_layers == 2


@pytest.mark.parametrize("budget_rows", [0, 4, 100])
def test_advance_with_compute_equals_computing_from_scratch(tmp_path, budget_rows):
    torch.manual_seed(0)
    layer = torch.nn.Linear(12, 12)
    x = torch.randn(N, 12)
    filled = torch.tensor([0, 2, 3, 5, 6, 7, 9])
    cache = make(tmp_path, budget_rows=budget_rows, shape=(12,))
    cache.advance(1, None)
    cache.store(filled, x[filled], 1)

    calls = []

    def compute(batch):
        calls.append(len(batch))
        return layer(batch)

    cache.advance(3, compute, chunk=3)
    assert calls == [3, 3, 1]
    assert cache.frozen_layers == 3 and cache.filled == len(filled)
    with torch.no_grad():  # same op on the same inputs: the rows advance visits, in its chunks
        expected = torch.cat([layer(x[filled[i : i + 3]]) for i in range(0, len(filled), 3)])
    values, mask = cache.lookup(torch.arange(N))
    assert mask.tolist() == [i in filled.tolist() for i in range(N)]  # unfilled stay unfilled
    assert torch.equal(values[mask], expected)
    assert not values.requires_grad


def test_advance_frees_old_memory_and_spill_file(tmp_path):
    cache = make(tmp_path, budget_rows=4, block_rows=2)
    x = sample_values(N, SHAPE, torch.float32)
    cache.advance(1, None)
    cache.store(torch.arange(N), x, 1)
    row_bytes = x[0].nbytes
    assert cache.resident_bytes == 4 * row_bytes
    assert spill_files(tmp_path) == ["cache-v1.bin"]

    old_resident = []

    def compute(batch):
        old_resident.append(cache.resident_bytes)  # still the old version during advance
        return batch * 2

    cache.advance(2, compute, chunk=2)
    # the old version's blocks were freed while the new version filled up
    assert old_resident == [4 * row_bytes, 2 * row_bytes, 0, 0, 0]
    assert spill_files(tmp_path) == ["cache-v2.bin"]
    assert cache.resident_bytes == 4 * row_bytes
    assert torch.equal(cache.lookup(torch.arange(4, N))[0], x[4:] * 2)

    cache.advance(5, None)  # starting empty frees everything of version 2
    assert spill_files(tmp_path) == []
    assert cache.resident_bytes == 0 and cache.spilled_bytes == 0 and cache.filled == 0
    assert not cache.lookup(torch.arange(N))[1].any()


def test_advance_changes_shape_and_dtype(tmp_path):
    cache = make(tmp_path, budget_rows=4, shape=(2, 3))
    x = sample_values(N, (2, 3), torch.float32)
    cache.advance(1, None)
    cache.store(torch.arange(N), x, 1)
    budget = cache.budget_bytes  # 4 rows of 24 bytes

    def compute(batch):  # (n, 2, 3) -> (n, 3) in bfloat16: 6 bytes a row
        return batch.sum(dim=1).to(torch.bfloat16)

    cache.advance(2, compute, chunk=4)
    assert cache.sample_shape == (3,) and cache.dtype == torch.bfloat16
    assert cache.memory_rows == min(N, budget // 6) == N  # smaller rows: all fit now
    assert spill_files(tmp_path) == []
    values, mask = cache.lookup(torch.arange(N))
    assert mask.all() and values.shape == (N, 3)
    assert same_bits(values, x.sum(dim=1).to(torch.bfloat16))
    manifest = cache.manifest()
    assert manifest["sample_shape"] == [3] and manifest["dtype"] == "bfloat16"

    def widen(batch):  # (n, 3) -> (n, 8): rows grow, part of them spill again
        return torch.cat([batch, batch, batch[:, :2]], dim=1)

    cache.advance(4, widen, chunk=3)
    assert cache.sample_shape == (8,) and cache.memory_rows == budget // 16
    assert spill_files(tmp_path) == ["cache-v4.bin"]
    xs = x.sum(dim=1).to(torch.bfloat16)
    assert same_bits(cache.lookup(torch.arange(N))[0], widen(xs))


def test_advance_shape_hint_must_agree(tmp_path):
    cache = make(tmp_path, budget_rows=4)
    cache.advance(1, None)
    cache.store(torch.arange(3), sample_values(3, SHAPE, torch.float32), 1)
    with pytest.raises(ValueError, match="expected"):
        cache.advance(2, lambda b: b.reshape(len(b), -1), sample_shape=(3, 4))
    cache.advance(2, None, sample_shape=(5,))
    assert cache.sample_shape == (5,) and cache.filled == 0


def test_failed_advance_keeps_old_version(tmp_path):
    cache = make(tmp_path, budget_rows=4, block_rows=2)
    x = sample_values(N, SHAPE, torch.float32)
    cache.advance(1, None)
    cache.store(torch.arange(N), x, 1)
    calls = 0

    def flaky(batch):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("boom")
        return batch

    with pytest.raises(RuntimeError, match="boom"):
        cache.advance(2, flaky, chunk=2)
    assert cache.frozen_layers == 1
    assert spill_files(tmp_path) == ["cache-v1.bin"]  # the new version's file is gone
    _, mask = cache.lookup(torch.arange(N))
    # rows 0..3 lived in memory blocks already freed; the rest is still there, intact
    assert mask.tolist() == [False] * 4 + [True] * 6 and cache.filled == 6
    assert same_bits(cache.lookup(torch.arange(4, N))[0], x[4:])


def test_budget_zero_spills_everything_and_huge_budget_nothing(tmp_path):
    x = sample_values(N, SHAPE, torch.bfloat16)
    spill = make(tmp_path / "zero", budget_rows=0, dtype=torch.bfloat16)
    spill.advance(1, None)
    spill.store(torch.arange(N), x, 1)
    assert spill.memory_rows == 0 and spill.resident_bytes == 0
    assert spill.spilled_bytes == x.nbytes
    assert same_bits(spill.lookup(torch.arange(N))[0], x)

    huge = ActivationCache(N, SHAPE, torch.bfloat16, 1 << 40, tmp_path / "huge")
    huge.advance(1, None)
    huge.store(torch.arange(N), x, 1)
    assert huge.memory_rows == N and huge.spilled_bytes == 0
    assert huge.resident_bytes == x.nbytes
    assert not (tmp_path / "huge").exists() or spill_files(tmp_path / "huge") == []
    assert same_bits(huge.lookup(torch.arange(N))[0], x)


def test_manifest_is_json(tmp_path):
    cache = make(tmp_path, budget_rows=4, dtype=torch.float16)
    cache.advance(6, None)
    cache.store(torch.tensor([0, 5, 9]), sample_values(3, SHAPE, torch.float16), 6)
    manifest = json.loads(json.dumps(cache.manifest()))
    assert manifest["frozen_layers"] == 6
    assert manifest["sample_shape"] == list(SHAPE) and manifest["dtype"] == "float16"
    assert manifest["filled"] == 3
    assert manifest["filled_in_memory"] == 1 and manifest["filled_spilled"] == 2
    assert manifest["memory"]["rows"] == [0, 4]
    assert manifest["spill"]["file"] == "cache-v6.bin" and manifest["spill"]["rows"] == [4, N]
    assert manifest["spill"]["created"] is True


def test_clear_removes_memory_and_files(tmp_path):
    cache = make(tmp_path, budget_rows=4)
    cache.advance(2, None)
    cache.store(torch.arange(N), sample_values(N, SHAPE, torch.float32), 2)
    assert spill_files(tmp_path) == ["cache-v2.bin"]
    cache.clear()
    assert spill_files(tmp_path) == []
    assert cache.resident_bytes == 0 and cache.spilled_bytes == 0 and cache.filled == 0
    assert not cache.lookup(torch.arange(N))[1].any()
    assert cache.frozen_layers == 2  # the version stays; the cache can refill


def test_cache_allowed():
    assert cache_allowed(False)[0] is True
    allowed, reason = cache_allowed(True)
    assert allowed is False and reason == AUGMENTATION_REASON
    assert "random augmentation" in reason and "caching disabled" in reason
