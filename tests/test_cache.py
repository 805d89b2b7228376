"""AutoCache (executor.cache): exact storage in the memory file and the spill file, versions,
sharing one cache between processes, release."""

import json
import os
import stat
import subprocess
import weakref

import pytest
import torch

from executor.cache import AUGMENTATION_REASON, ActivationCache, cache_allowed, memory_dir_for
from pipeplan.spawn import run_ranks

N = 10
SHAPE = (3, 4)
PAGE_SHAPE = (1024,)  # float32 rows of one 4 KiB page: a sparse file's pages count rows


def make(tmp_path, *, budget_rows, shape=SHAPE, dtype=torch.float32, n=N, version=1):
    row_bytes = torch.Size(shape).numel() * dtype.itemsize
    cache = ActivationCache(
        n, budget_rows * row_bytes, tmp_path / "spill", memory_dir=tmp_path / "memory"
    )
    if version:
        cache.create(version, shape, dtype)
    return cache


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


def names(directory):
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_store_lookup_bit_exact_in_memory_and_spilled(tmp_path, dtype):
    cache = make(tmp_path, budget_rows=4, dtype=dtype)
    assert cache.memory_rows == 4
    x = sample_values(N, SHAPE, dtype)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    cache.store(order[:6], x[order[:6]], 1)
    cache.store(order[6:], x[order[6:]], 1)
    assert cache.filled == N
    assert names(tmp_path / "memory") == ["cache-v1.map", "cache-v1.rows"]
    assert names(tmp_path / "spill") == ["cache-v1.spill"]
    row_bytes = x[0].nbytes
    assert (tmp_path / "memory" / "cache-v1.rows").stat().st_size == 4 * row_bytes
    assert (tmp_path / "spill" / "cache-v1.spill").stat().st_size == 6 * row_bytes

    query = torch.tensor([9, 0, 5, 3, 4, 7, 1, 8, 2, 6])
    values, mask = cache.lookup(query)
    assert mask.all() and mask.dtype == torch.bool
    assert values.dtype == dtype and values.shape == (N, *SHAPE)
    assert same_bits(values, x[query])
    assert torch.equal(values[4:], x[query][4:])  # no special values there: plain equality too
    # each region separately
    assert same_bits(cache.lookup(torch.arange(4))[0], x[:4])
    assert same_bits(cache.lookup(torch.arange(4, N))[0], x[4:])


def test_files_are_sparse_until_rows_are_written(tmp_path):
    cache = make(tmp_path, budget_rows=4, shape=PAGE_SHAPE)
    page = 4096
    assert cache.resident_bytes == 0 and cache.spilled_bytes == 0  # nothing written yet
    x = sample_values(N, PAGE_SHAPE, torch.float32)
    cache.store(torch.tensor([1, 2, 7]), x[[1, 2, 7]], 1)
    assert cache.resident_bytes == 2 * page  # rows 1 and 2
    assert cache.spilled_bytes == page  # row 7
    manifest = cache.manifest()
    assert manifest["memory"]["resident_bytes"] == 2 * page
    assert manifest["spill"]["bytes"] == page


def test_partial_fill_mask_and_overwrite(tmp_path):
    cache = make(tmp_path, budget_rows=5, version=0)
    _, mask = cache.lookup(torch.arange(N))
    assert not mask.any()  # version 0 holds nothing
    cache.create(2, SHAPE, torch.float32)
    x = sample_values(N, SHAPE, torch.float32)
    stored = torch.tensor([1, 4, 6, 9])
    cache.store(stored, x[stored], 2)
    assert cache.filled == 4

    query = torch.tensor([0, 1, 1, 9, 5, 6, 4, 8])  # repeats allowed in lookups
    values, mask = cache.lookup(query)
    assert mask.tolist() == [False, True, True, True, False, True, True, False]
    assert torch.equal(values[mask], x[query[mask]])

    y = x + 1
    cache.store(torch.tensor([4, 7]), y[[4, 7]], 2)  # 4 overwritten, 7 new
    assert cache.filled == 5
    values, mask = cache.lookup(torch.tensor([4, 7, 1]))
    assert mask.all()
    assert torch.equal(values, torch.stack([y[4], y[7], x[1]]))
    assert cache.manifest()["filled_in_memory"] == 2 and cache.manifest()["filled_spilled"] == 3


def test_store_rejects_stale_version_and_bad_input(tmp_path):
    cache = make(tmp_path, budget_rows=5, version=0)
    x = sample_values(N, SHAPE, torch.float32)
    with pytest.raises(ValueError, match="nothing is frozen"):
        cache.store(torch.arange(2), x[:2], 0)
    cache.create(3, SHAPE, torch.float32)
    with pytest.raises(ValueError, match="stale"):
        cache.store(torch.arange(2), x[:2], 2)
    with pytest.raises(ValueError, match="stale"):
        cache.store(torch.arange(2), x[:2], 4)
    with pytest.raises(ValueError, match="repeat"):
        cache.store(torch.tensor([1, 1]), x[:2], 3)
    with pytest.raises(IndexError):
        cache.lookup(torch.tensor([N]))
    with pytest.raises(ValueError, match="does not match"):
        cache.store(torch.arange(3), x[:2], 3)
    with pytest.raises(ValueError, match="holds float32"):
        cache.store(torch.tensor([5]), x[:1].double(), 3)  # no silent dtype conversion
    with pytest.raises(ValueError, match="holds float32"):
        cache.store(torch.tensor([5]), x[:1].reshape(1, 12), 3)
    cache.store(torch.arange(2), x[:2], 3)
    assert cache.filled == 2


def test_versions_must_grow(tmp_path):
    cache = make(tmp_path, budget_rows=5, version=2)
    for bad in (0, 1, 2):
        with pytest.raises(ValueError, match="must grow"):
            cache.create(bad, SHAPE, torch.float32)
    assert cache.frozen_layers == 2


@pytest.mark.parametrize("budget_rows", [0, 3, N])
def test_advance_with_compute_equals_computing_from_scratch(tmp_path, budget_rows):
    x = sample_values(N, (12,), torch.float32)
    x[0, :4] = 0.5  # no NaN: the transformation below must be comparable
    filled = torch.tensor([0, 2, 3, 5, 8, 9])
    cache = make(tmp_path, budget_rows=budget_rows, shape=(12,))
    cache.store(filled, x[filled], 1)
    weight = torch.randn(12, 12, generator=torch.Generator().manual_seed(2))

    def compute(batch):  # the "newly frozen layers"
        return torch.tanh(batch @ weight)

    cache.advance(3, compute, (12,), torch.float32, chunk=4)
    assert cache.frozen_layers == 3 and cache.filled == len(filled)
    values, mask = cache.lookup(torch.arange(N))
    assert torch.equal(mask, torch.isin(torch.arange(N), filled))
    # the same chunks as the advance: a matmul's bits depend on the batch it runs in
    expected = torch.cat([compute(x[filled][i : i + 4]) for i in range(0, len(filled), 4)])
    assert same_bits(values[mask], expected)


def test_advance_deletes_old_files_and_empty_start(tmp_path):
    cache = make(tmp_path, budget_rows=4)
    x = sample_values(N, SHAPE, torch.float32)
    cache.store(torch.arange(N), x, 1)
    seen_previous = []

    def compute(batch):
        seen_previous.append(names(tmp_path / "memory"))  # both versions during the advance
        return batch * 2

    cache.advance(2, compute, SHAPE, torch.float32, chunk=4)
    assert seen_previous[0] == ["cache-v1.map", "cache-v1.rows", "cache-v2.map", "cache-v2.rows"]
    assert names(tmp_path / "memory") == ["cache-v2.map", "cache-v2.rows"]
    assert names(tmp_path / "spill") == ["cache-v2.spill"]
    assert torch.equal(cache.lookup(torch.arange(4, N))[0], x[4:] * 2)

    cache.advance(5, None, (7,), torch.float16)  # starting empty frees version 2
    assert names(tmp_path / "memory") == ["cache-v5.map", "cache-v5.rows"]
    assert cache.filled == 0 and cache.sample_shape == (7,) and cache.dtype == torch.float16
    assert not cache.lookup(torch.arange(N))[1].any()


def test_advance_changes_shape_and_dtype(tmp_path):
    cache = make(tmp_path, budget_rows=4, shape=(2, 3))
    x = sample_values(N, (2, 3), torch.float32)
    cache.store(torch.arange(N), x, 1)
    budget = cache.budget_bytes  # 4 rows of 24 bytes

    def compute(batch):  # (n, 2, 3) -> (n, 3) in bfloat16: 6 bytes a row
        return batch.sum(dim=1).to(torch.bfloat16)

    cache.advance(2, compute, (3,), torch.bfloat16, chunk=4)
    assert cache.sample_shape == (3,) and cache.dtype == torch.bfloat16
    assert cache.memory_rows == min(N, budget // 6) == N  # smaller rows: all fit now
    values, mask = cache.lookup(torch.arange(N))
    assert mask.all() and values.shape == (N, 3)
    assert same_bits(values, x.sum(dim=1).to(torch.bfloat16))
    manifest = cache.manifest()
    assert manifest["sample_shape"] == [3] and manifest["dtype"] == "bfloat16"

    def widen(batch):  # (n, 3) -> (n, 8): rows grow, part of them spill again
        return torch.cat([batch, batch, batch[:, :2]], dim=1)

    cache.advance(4, widen, (8,), torch.bfloat16, chunk=3)
    assert cache.sample_shape == (8,) and cache.memory_rows == budget // 16
    xs = x.sum(dim=1).to(torch.bfloat16)
    assert same_bits(cache.lookup(torch.arange(N))[0], widen(xs))


def test_advance_refuses_rows_of_another_shape(tmp_path):
    cache = make(tmp_path, budget_rows=4)
    cache.store(torch.arange(3), sample_values(3, SHAPE, torch.float32), 1)
    with pytest.raises(ValueError, match="holds float32"):
        cache.advance(2, lambda b: b.reshape(len(b), -1), SHAPE, torch.float32)
    assert cache.frozen_layers == 1 and cache.filled == 3


def test_failed_advance_keeps_old_version(tmp_path):
    cache = make(tmp_path, budget_rows=4)
    x = sample_values(N, SHAPE, torch.float32)
    cache.store(torch.arange(N), x, 1)
    calls = 0

    def flaky(batch):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("boom")
        return batch

    with pytest.raises(RuntimeError, match="boom"):
        cache.advance(2, flaky, SHAPE, torch.float32, chunk=2)
    assert cache.frozen_layers == 1
    assert names(tmp_path / "memory") == ["cache-v1.map", "cache-v1.rows"]  # v2 is gone
    values, mask = cache.lookup(torch.arange(N))
    assert mask.all() and cache.filled == N  # nothing of version 1 was lost
    assert same_bits(values, x)


def test_budget_zero_spills_everything_and_huge_budget_nothing(tmp_path):
    x = sample_values(N, SHAPE, torch.bfloat16)
    spill = make(tmp_path / "zero", budget_rows=0, dtype=torch.bfloat16)
    spill.store(torch.arange(N), x, 1)
    assert spill.memory_rows == 0 and spill.resident_bytes == 0
    assert (tmp_path / "zero" / "spill" / "cache-v1.spill").stat().st_size == x.nbytes
    assert same_bits(spill.lookup(torch.arange(N))[0], x)

    huge = ActivationCache(N, 1 << 40, tmp_path / "huge")
    huge.create(1, SHAPE, torch.bfloat16)
    huge.store(torch.arange(N), x, 1)
    assert huge.memory_rows == N and huge.spilled_bytes == 0
    assert (tmp_path / "huge" / "cache-v1.spill").stat().st_size == 0
    assert same_bits(huge.lookup(torch.arange(N))[0], x)


def test_manifest_is_json(tmp_path):
    cache = make(tmp_path, budget_rows=4, dtype=torch.float16, version=6)
    cache.store(torch.tensor([0, 5, 9]), sample_values(3, SHAPE, torch.float16), 6)
    manifest = json.loads(json.dumps(cache.manifest()))
    assert manifest["frozen_layers"] == 6
    assert manifest["sample_shape"] == list(SHAPE) and manifest["dtype"] == "float16"
    assert manifest["filled"] == 3
    assert manifest["filled_in_memory"] == 1 and manifest["filled_spilled"] == 2
    assert manifest["memory"]["rows"] == [0, 4]
    assert manifest["spill"]["file"].endswith("cache-v6.spill")
    assert manifest["spill"]["rows"] == [4, N]


def test_close_removes_files_of_the_creator_only(tmp_path):
    creator = make(tmp_path, budget_rows=4, version=2)
    other = make(tmp_path, budget_rows=4, version=0)
    other.attach(2, SHAPE, torch.float32)
    other.store(torch.arange(N), sample_values(N, SHAPE, torch.float32), 2)
    assert creator.filled == N  # one set of files: what one handle stores, the other sees
    other.close(unlink=True)  # did not create them: they stay
    assert names(tmp_path / "memory") == ["cache-v2.map", "cache-v2.rows"]
    creator.close(unlink=True)
    assert names(tmp_path / "memory") == [] and names(tmp_path / "spill") == []
    assert creator.frozen_layers == 0 and not creator.lookup(torch.arange(N))[1].any()


def test_shared_advance_split_between_handles(tmp_path):
    """Two handles (as two stage-0 ranks of a node) advance their halves of the rows; each
    then reads every row, and the old version's files go when the creator drops them."""
    x = sample_values(N, (6,), torch.float32)
    x[0, :4] = 1.0
    creator = make(tmp_path, budget_rows=4, shape=(6,))
    other = make(tmp_path, budget_rows=4, shape=(6,), version=0)
    other.attach(1, (6,), torch.float32)
    filled = torch.tensor([0, 1, 3, 4, 6, 7, 9])
    creator.store(filled[:3], x[filled[:3]], 1)
    other.store(filled[3:], x[filled[3:]], 1)

    creator.create(3, (6,), torch.float32)
    other.attach(3, (6,), torch.float32)
    calls = []

    def double(who):
        def compute(batch):
            calls.append((who, len(batch)))
            return batch * 2

        return compute

    done = [creator.advance_rows(double("a"), 0, 2, chunk=2)]
    done.append(other.advance_rows(double("b"), 1, 2, chunk=2))
    assert done == [4, 3]  # filled rows 0, 3, 6, 9 and 1, 4, 7
    other.drop_previous()
    assert "cache-v1.rows" in names(tmp_path / "memory")  # not its files to delete
    creator.drop_previous()
    assert names(tmp_path / "memory") == ["cache-v3.map", "cache-v3.rows"]
    for handle in (creator, other):
        values, mask = handle.lookup(torch.arange(N))
        assert torch.equal(mask, torch.isin(torch.arange(N), filled))
        assert torch.equal(values[mask], x[filled] * 2)


def _store_half(rank, directory, values):
    cache = ActivationCache(N, 4 * values[0].nbytes, directory, memory_dir=directory / "m")
    cache.attach(1, tuple(values.shape[1:]), values.dtype)
    mine = torch.arange(rank, N, 2)
    cache.store(mine, values[mine], 1)


def test_rows_stored_by_other_processes_are_hits(tmp_path):
    """Real sharing: two processes each store half of the rows into one cache through their
    own mappings; this process, which created it, then reads every row back exactly."""
    x = sample_values(N, SHAPE, torch.float32)
    creator = ActivationCache(N, 4 * x[0].nbytes, tmp_path, memory_dir=tmp_path / "m")
    creator.create(1, SHAPE, torch.float32)
    assert not creator.lookup(torch.arange(N))[1].any()
    run_ranks(_store_half, 2, (tmp_path, x), deadline_s=120, what="cache writers")
    values, mask = creator.lookup(torch.arange(N))
    assert mask.all() and same_bits(values, x)


def test_memory_dir_prefers_dev_shm_when_it_has_room(tmp_path):
    fallback = tmp_path / "cache"
    assert memory_dir_for(fallback, 1 << 60) == fallback  # no host has an exabyte free
    assert memory_dir_for(fallback, 1, root=tmp_path / "no-shm") == fallback
    shm = tmp_path / "shm"
    shm.mkdir()
    made = memory_dir_for(fallback, 1, root=shm)
    assert made.parent == shm and f"-{os.getpid()}-" in made.name
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def gone_process() -> tuple[int, int]:
    """(pid, start time) of a process that has ended."""
    from executor.cache import process_start

    child = subprocess.Popen(["sleep", "30"])
    start = process_start(child.pid)
    child.kill()
    child.wait()
    return child.pid, start


def test_caches_of_runs_that_are_gone_are_removed_and_no_other(tmp_path):
    """Found by the seventeenth round: SIGKILL of `pipeplan run` in a cached phase left
    /dev/shm/pipeplan-<key>/ (host memory) until a reboot. The folder's name records who made
    it (pid and start time); each run's start (`launch.train_rank`, on every node) removes this
    user's folders whose maker is gone, and nothing else: not a live run's (its maker exists),
    not a pid's later process (another start time), not another pid namespace's (a container
    sharing /dev/shm), not an older pipeplan's name, a link or a file with the name, nor
    another user's folder."""
    from executor.cache import memory_dir_for, pid_namespace, process_start, remove_stale_caches

    shm = tmp_path / "shm"
    shm.mkdir()
    live = memory_dir_for(tmp_path / "fallback", 1, root=shm)
    pid, start = gone_process()
    me, mine = os.getpid(), process_start(os.getpid())
    ns = pid_namespace()
    gone = [shm / f"pipeplan-{ns}-{pid}-{start}-{'a' * 16}"]
    gone.append(shm / f"pipeplan-{ns}-{me}-{mine + 1}-{'b' * 16}")  # this pid, a later process
    kept = [
        live,
        shm / "pipeplan-eddb7ab6209c",
        shm / f"pipeplan-{ns + 1}-{pid}-{start}-{'f' * 16}",
    ]
    for folder in gone + kept:
        folder.mkdir(exist_ok=True, mode=0o700)
        (folder / "node0-v3.rows").write_bytes(b"rows")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "node0-v3.rows").write_bytes(b"precious")
    kept.append(shm / f"pipeplan-{ns}-{pid}-{start}-{'c' * 16}")
    kept[-1].symlink_to(victim, target_is_directory=True)
    kept.append(shm / f"pipeplan-{ns}-{pid}-{start}-{'d' * 16}")
    kept[-1].write_bytes(b"")
    if os.getuid() == 0:  # root can make a folder that is another user's
        kept.append(shm / f"pipeplan-{ns}-{pid}-{start}-{'e' * 16}")
        kept[-1].mkdir()
        os.chown(kept[-1], 12345, -1)
    assert sorted(remove_stale_caches(shm)) == sorted(gone)
    assert sorted(shm.iterdir()) == sorted(kept)
    assert (live / "node0-v3.rows").read_bytes() == b"rows"
    assert (victim / "node0-v3.rows").read_bytes() == b"precious"
    assert remove_stale_caches(shm) == []


@pytest.mark.timeout(30)
def test_a_run_folder_named_as_a_cache_is_not_swept(tmp_path):
    """Found by the thirty-third round: a run folder in /dev/shm (`--runs-dir /dev/shm`) whose
    name looked like a cache's (`pipeplan-NS-PID-START-TOKEN`, PID gone) was deleted with its
    checkpoints by the next run's sweep of stale caches: a name was taken for proof. Now
    the sweep unlinks only the files a cache writes there (`node0-v3.rows`, `.map`) and the
    folder once empty: a folder holding anything else is left as it is, every file kept; a
    real stale cache is still removed."""
    from executor.cache import pid_namespace, remove_stale_caches

    shm = tmp_path / "shm"
    shm.mkdir()
    pid, start = gone_process()
    ns = pid_namespace()
    run = shm / f"pipeplan-{ns}-{pid}-{start}-{'a' * 16}"
    (run / "checkpoints").mkdir(parents=True, mode=0o700)
    run.chmod(0o700)
    (run / "run.json").write_text("{}")
    (run / "checkpoints" / "phase-0.pt").write_bytes(b"weights")
    mixed = shm / f"pipeplan-{ns}-{pid}-{start}-{'b' * 16}"  # a cache's file and the user's
    mixed.mkdir(mode=0o700)
    (mixed / "node0-v3.rows").write_bytes(b"rows")
    (mixed / "notes.txt").write_bytes(b"mine")
    stale = shm / f"pipeplan-{ns}-{pid}-{start}-{'c' * 16}"
    stale.mkdir(mode=0o700)
    for name in ("node0-v3.rows", "node0-v3.map", "node1-v5.rows"):
        (stale / name).write_bytes(b"x")
    empty = shm / f"pipeplan-{ns}-{pid}-{start}-{'d' * 16}"  # killed before its first file
    empty.mkdir(mode=0o700)
    before = {p: p.read_bytes() for p in [*run.rglob("*"), *mixed.iterdir()] if p.is_file()}
    assert sorted(remove_stale_caches(shm)) == sorted([stale, empty])
    assert sorted(shm.iterdir()) == sorted([run, mixed])
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p for p in [*run.rglob("*"), *mixed.iterdir()] if p.is_file()) == sorted(before)


def test_files_a_killed_run_left_under_its_run_directory_are_removed(tmp_path):
    """Found by the seventeenth round (the spill files of a killed run): the node's leader
    removes its node's leftover files before it makes the first version (a link among them is
    unlinked, its target untouched); another node's files and the user's own stay."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    spill, memory = tmp_path / "run" / "cache" / "node0", tmp_path / "run" / "cache"
    spill.mkdir(parents=True, mode=0o700)
    memory.chmod(0o700)
    left = [spill / "node0-v3.spill", memory / "node0-v3.rows", memory / "node0-v3.map"]
    for path in left:
        path.write_bytes(b"x")
    (spill / "node0-v5.spill").symlink_to(victim)
    left.append(spill / "node0-v5.spill")
    others = [spill / "node1-v3.spill", memory / "notes.txt"]
    for path in others:
        path.write_bytes(b"y")
    cache = ActivationCache(N, 4, spill, memory_dir=memory, name="node0")
    assert sorted(cache.remove_leftovers()) == sorted(left)
    assert all(path.exists() for path in others) and victim.read_bytes() == b"precious"
    assert not any(os.path.lexists(path) for path in left)


def test_a_runs_caches_are_removed_once_its_ranks_are_gone(tmp_path):
    """Found by the eighteenth round: SIGTERM or Ctrl-C to `pipeplan run` in a cached phase
    left rank 0's folder in /dev/shm until the next run (a rank killed by SIGTERM cannot clean
    up). Once every rank has ended, the launcher removes what a normal end removes: the
    folders in /dev/shm whose maker is gone (a live run's stays) and the cache files under the
    run directory, with their folders once empty; the user's own file, and a link's target,
    stay."""
    from executor.cache import pid_namespace, remove_run_caches

    shm, run = tmp_path / "shm", tmp_path / "run"
    shm.mkdir()
    live = memory_dir_for(tmp_path / "fallback", 1, root=shm)
    pid, start = gone_process()
    gone = shm / f"pipeplan-{pid_namespace()}-{pid}-{start}-{'a' * 16}"
    gone.mkdir(mode=0o700)
    (gone / "node0-v3.rows").write_bytes(b"rows")
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    spill, memory = run / "cache" / "node0", run / "cache"
    spill.mkdir(parents=True, mode=0o700)
    memory.chmod(0o700)
    left = [spill / "node0-v3.spill", memory / "node1-v3.rows", memory / "node1-v3.map"]
    for path in left:
        path.write_bytes(b"x")
    left.append(spill / "node0-v5.spill")
    left[-1].symlink_to(victim)
    (memory / "notes.txt").write_bytes(b"mine")
    assert sorted(remove_run_caches(run, shm)) == sorted([gone, *left])
    assert sorted(shm.iterdir()) == [live] and not spill.exists()
    assert sorted(memory.iterdir()) == [memory / "notes.txt"]
    assert victim.read_bytes() == b"precious"
    (memory / "notes.txt").unlink()
    assert remove_run_caches(run, shm) == [] and not memory.exists()  # empty: removed too


def test_a_run_directorys_cache_that_is_a_link_is_not_followed(tmp_path):
    """The same: `cache` under the run directory a link to another folder (planted, or the
    user's): nothing in that folder is removed."""
    from executor.cache import remove_run_caches

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "node0").mkdir(parents=True, mode=0o700)
    elsewhere.chmod(0o700)
    (elsewhere / "node0" / "node0-v3.spill").write_bytes(b"precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "cache").symlink_to(elsewhere, target_is_directory=True)
    assert remove_run_caches(tmp_path / "run", tmp_path / "shm") == []
    assert (elsewhere / "node0" / "node0-v3.spill").read_bytes() == b"precious"


def test_a_failing_rank_removes_the_folder_it_made(tmp_path, monkeypatch):
    """Found by the eighteenth round: a rank that fails (an exception, Ctrl-C) exits at once
    after its report, without the worker's clean-up, and under torchrun no launcher of
    pipeplan's removes its folder in /dev/shm; it now removes the folders it made itself
    (`launch.main`), and only those."""
    import executor.cache
    from executor.cache import remove_own_caches

    monkeypatch.setattr(executor.cache, "_MADE", [])  # not other tests' folders
    monkeypatch.setattr(executor.cache, "_OPENED", weakref.WeakSet(), raising=False)
    shm = tmp_path / "shm"
    shm.mkdir()
    other = shm / "pipeplan-1-2-3-0123456789abcdef"
    other.mkdir()
    made = memory_dir_for(tmp_path / "fallback", 1, root=shm)
    (made / "node0-v3.rows").write_bytes(b"rows")
    assert remove_own_caches() == [made]
    assert sorted(shm.iterdir()) == [other]
    assert remove_own_caches() == []


@pytest.mark.parametrize("where", ["shm", "run"])
@pytest.mark.parametrize("maker", [True, False])
def test_a_failing_rank_removes_its_nodes_spill_files_under_the_run(
    tmp_path, monkeypatch, where, maker
):
    """Found by the twenty-fifth round: Ctrl-C of a torchrun-started run whose cache had
    spilled left `runs/NAME/cache/node0/node0-v2.spill` (12.5 MB there, GBs for a real
    dataset; nothing ever removed it where the run had no checkpoint): a failing rank removed
    its folder in /dev/shm only. It now removes every file of its node's open cache, the spill
    file and (where /dev/shm lacked room) the rows under the run directory, whichever rank of
    the node made them (the maker may be stopped by the agent first), then those folders once
    empty; the user's own files stay."""
    import executor.cache
    from executor.cache import remove_own_caches

    monkeypatch.setattr(executor.cache, "_MADE", [])  # not other tests' folders
    monkeypatch.setattr(executor.cache, "_OPENED", weakref.WeakSet(), raising=False)
    run = tmp_path / "run"
    run.mkdir()
    shm = tmp_path / "shm"
    shm.mkdir()
    memory = memory_dir_for(run / "cache", 1 if where == "shm" else 1 << 60, root=shm)
    row = 4 * torch.Size(SHAPE).numel()
    made = ActivationCache(N, 3 * row, run / "cache" / "node0", memory_dir=memory, name="node0")
    made.create(2, SHAPE, torch.float32)
    made.store(torch.arange(N), sample_values(N, SHAPE, torch.float32), frozen_layers=2)
    cache = made
    if not maker:  # a peer of the node, which only attached: the maker has let go
        made.close(unlink=False)
        executor.cache._MADE.clear()
        cache = ActivationCache(
            N, 3 * row, run / "cache" / "node0", memory_dir=memory, name="node0"
        )
        cache.attach(2, SHAPE, torch.float32)
    assert (run / "cache" / "node0" / "node0-v2.spill").exists()
    mine = run / "mine.txt"  # the user's own file in the run directory stays
    mine.write_text("x")
    remove_own_caches()
    assert sorted(run.iterdir()) == [mine]
    assert list(shm.iterdir()) == []
    assert remove_own_caches() == []


def test_cache_allowed():
    assert cache_allowed(False)[0] is True
    allowed, reason = cache_allowed(True)
    assert allowed is False and reason == AUGMENTATION_REASON
    assert "random augmentation" in reason and "caching disabled" in reason
