"""AutoCache: per-sample outputs of the frozen prefix, kept on the host of one rank.

Once the first k layers of the model are frozen (k is the *freeze point*; it only grows), their
output for a given training sample no longer changes. Stage 0 of every data-parallel replica can
then store that output per sample index the first time it computes it and, in later epochs, read
it back instead of recomputing the prefix.

The stored values form one *version*, named by the freeze point they belong to
(`ActivationCache.frozen_layers`; 0 means nothing is frozen and nothing is stored). When the
freeze point grows from k to k', `ActivationCache.advance` moves the cache to version k' either
incrementally (run only the newly frozen layers k..k'-1 on the cached rows, chunk by chunk) or by
starting empty. The old version's memory and spill file are released as soon as they are no
longer needed, so a version never lingers.

Storage of one version: row i (the output for sample i) lives in host memory when
`i < memory_rows`, where `memory_rows = budget_bytes // row_bytes`, and in a memory-mapped spill
file `{name}-v{frozen_layers}.bin` in `spill_dir` otherwise. Memory is allocated lazily in blocks
of about `block_bytes`, so a partly filled cache only holds the blocks it touched, and `advance`
frees old blocks while it fills the new ones. Rows are kept as raw bytes in the spill file, which
is how dtypes numpy lacks (bfloat16) are stored bit-exactly. A bitmap records which rows are
filled.

Caching is only sound when a sample's input is the same every epoch: with random data
augmentation it is not, and `cache_allowed` says so.

The cache is not thread-safe; one rank's training loop owns it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger("pipeplan.cache")

DEFAULT_BLOCK_BYTES = 32 << 20
"""Host memory is allocated in blocks of about this many bytes (at least one row each)."""

MANIFEST_FORMAT = 1

AUGMENTATION_REASON = (
    "random augmentation changes a sample every epoch, so its frozen activations cannot be "
    "reused; caching disabled"
)


def cache_allowed(augmented: bool) -> tuple[bool, str]:
    """Whether activations of a dataset may be cached, and why (the caller logs the reason)."""
    if augmented:
        return False, AUGMENTATION_REASON
    return True, "samples are deterministic, so frozen activations can be reused"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _Storage:
    """The rows of one version: memory blocks for rows below `memory_rows`, a spill file above.

    It knows nothing about which rows are filled; `ActivationCache` keeps that bitmap.
    """

    def __init__(
        self,
        num_samples: int,
        sample_shape: tuple[int, ...],
        dtype: torch.dtype,
        budget_bytes: int,
        block_bytes: int,
        spill_path: Path,
    ) -> None:
        self.num_samples = num_samples
        self.sample_shape = sample_shape
        self.dtype = dtype
        self.spill_path = spill_path
        self.row_bytes = math.prod(sample_shape) * dtype.itemsize
        if self.row_bytes == 0:  # empty rows cost nothing: keep them all "in memory"
            self.memory_rows = num_samples
            self.block_rows = max(1, num_samples)
        else:
            self.memory_rows = min(num_samples, budget_bytes // self.row_bytes)
            self.block_rows = max(1, min(self.memory_rows, block_bytes // self.row_bytes))
        self.spill_rows = num_samples - self.memory_rows
        self._blocks: list[torch.Tensor | None] = [None] * math.ceil(
            self.memory_rows / self.block_rows
        )
        self._spill: np.memmap | None = None
        self.freed_below = 0  # memory rows below this were dropped by `free_blocks_below`

    # --- sizes -----------------------------------------------------------------------------

    @property
    def resident_bytes(self) -> int:
        return sum(b.nbytes for b in self._blocks if b is not None)

    @property
    def spilled_bytes(self) -> int:
        return self.spill_rows * self.row_bytes if self._spill is not None else 0

    def matches(self, sample_shape: tuple[int, ...], dtype: torch.dtype) -> bool:
        return tuple(sample_shape) == self.sample_shape and dtype == self.dtype

    # --- allocation ------------------------------------------------------------------------

    def _block(self, b: int) -> torch.Tensor:
        block = self._blocks[b]
        if block is None:
            rows = min(self.block_rows, self.memory_rows - b * self.block_rows)
            block = torch.empty((rows, *self.sample_shape), dtype=self.dtype)
            self._blocks[b] = block
        return block

    def _memmap(self) -> np.memmap:
        if self._spill is None:
            self.spill_path.parent.mkdir(parents=True, exist_ok=True)
            # mode "w+" creates (or truncates a stale leftover) a sparse file of the full size.
            self._spill = np.memmap(
                self.spill_path, dtype=np.uint8, mode="w+", shape=(self.spill_rows, self.row_bytes)
            )
            logger.debug(
                "cache spill file %s: %d rows x %d bytes",
                self.spill_path,
                self.spill_rows,
                self.row_bytes,
            )
        return self._spill

    # --- rows ------------------------------------------------------------------------------

    def write(self, idx: torch.Tensor, values: torch.Tensor) -> None:
        """Store `values[j]` as row `idx[j]`; `idx` is unique, `values` contiguous on CPU."""
        in_memory = idx < self.memory_rows
        if bool(in_memory.any()):
            rows, vals = idx[in_memory], values[in_memory]
            block_ids = torch.div(rows, self.block_rows, rounding_mode="floor")
            for b in torch.unique(block_ids).tolist():
                sel = block_ids == b
                self._block(b)[rows[sel] - b * self.block_rows] = vals[sel]
        spilled = ~in_memory
        if bool(spilled.any()):
            rows = (idx[spilled] - self.memory_rows).numpy()
            raw = values[spilled].reshape(len(rows), -1).view(torch.uint8)
            self._memmap()[rows] = raw.numpy()

    def read_into(self, out: torch.Tensor, positions: torch.Tensor, idx: torch.Tensor) -> None:
        """`out[positions[j]] = row idx[j]` for rows that were written."""
        in_memory = idx < self.memory_rows
        if bool(in_memory.any()):
            rows, pos = idx[in_memory], positions[in_memory]
            block_ids = torch.div(rows, self.block_rows, rounding_mode="floor")
            for b in torch.unique(block_ids).tolist():
                block = self._blocks[b]
                if block is None:
                    raise RuntimeError(f"cache block {b} read before it was written")
                sel = block_ids == b
                out[pos[sel]] = block[rows[sel] - b * self.block_rows]
        spilled = ~in_memory
        if bool(spilled.any()):
            if self._spill is None:
                raise RuntimeError("cache spill file read before it was written")
            rows = (idx[spilled] - self.memory_rows).numpy()
            raw = torch.from_numpy(np.asarray(self._spill[rows]))  # fancy indexing copies
            out[positions[spilled]] = raw.view(self.dtype).reshape(len(rows), *self.sample_shape)

    def read(self, idx: torch.Tensor) -> torch.Tensor:
        out = torch.empty((len(idx), *self.sample_shape), dtype=self.dtype)
        self.read_into(out, torch.arange(len(idx)), idx)
        return out

    # --- release ---------------------------------------------------------------------------

    def free_blocks_below(self, row: int) -> None:
        """Drop the memory blocks that lie entirely below `row` (they will not be read again)."""
        whole = min(row, self.memory_rows) // self.block_rows
        for b in range(whole):
            self._blocks[b] = None
        self.freed_below = max(self.freed_below, min(whole * self.block_rows, self.memory_rows))

    def release(self) -> None:
        """Free the memory blocks and delete the spill file."""
        self._blocks = [None] * len(self._blocks)
        self.freed_below = self.memory_rows
        if self._spill is not None:
            self._spill = None  # our reads copy, so nothing else maps the file
            self.spill_path.unlink(missing_ok=True)
            logger.debug("deleted cache spill file %s", self.spill_path)

    def describe(self) -> dict[str, Any]:
        return {
            "sample_shape": list(self.sample_shape),
            "dtype": _dtype_name(self.dtype),
            "row_bytes": self.row_bytes,
            "memory": {
                "rows": [0, self.memory_rows],
                "block_rows": self.block_rows,
                "blocks_allocated": sum(b is not None for b in self._blocks),
                "resident_bytes": self.resident_bytes,
            },
            "spill": {
                "file": self.spill_path.name,
                "rows": [self.memory_rows, self.num_samples],
                "created": self._spill is not None,
                "bytes": self.spilled_bytes,
            },
        }


class ActivationCache:
    """Per-sample outputs of the frozen prefix, for one rank.

    `num_samples` is the size of the dataset (sample indices run from 0 to num_samples - 1);
    `sample_shape` and `dtype` describe one row of the first version. A version's shape and dtype
    may differ from the previous one's (the newly frozen layers may change the hidden shape): they
    follow the rows `advance` computes, `advance(..., sample_shape=...)`, or — while a version is
    still empty — the first `store`.

    `spill_dir` should be private to this rank (or pass a distinct `name`): spill files are named
    `{name}-v{frozen_layers}.bin`.
    """

    def __init__(
        self,
        num_samples: int,
        sample_shape: tuple[int, ...],
        dtype: torch.dtype,
        budget_bytes: int,
        spill_dir: str | Path,
        *,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        name: str = "cache",
    ) -> None:
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
        if any(d < 0 for d in sample_shape):
            raise ValueError(f"bad sample_shape {sample_shape}")
        self.num_samples = num_samples
        self.budget_bytes = budget_bytes
        self.block_bytes = block_bytes
        self.name = name
        self.spill_dir = Path(spill_dir)
        self._version = 0
        self._filled = torch.zeros(num_samples, dtype=torch.bool)
        self._num_filled = 0
        self._storage = self._new_storage(tuple(sample_shape), dtype, 0)

    # --- state -----------------------------------------------------------------------------

    @property
    def frozen_layers(self) -> int:
        """The version: the freeze point the stored values belong to (0 = nothing frozen)."""
        return self._version

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Per-sample shape of the current version."""
        return self._storage.sample_shape

    @property
    def dtype(self) -> torch.dtype:
        return self._storage.dtype

    @property
    def filled(self) -> int:
        """Number of rows filled in the current version."""
        return self._num_filled

    @property
    def resident_bytes(self) -> int:
        """Host memory held by row storage (allocated blocks; excludes the 1-byte/row bitmap)."""
        return self._storage.resident_bytes

    @property
    def spilled_bytes(self) -> int:
        """Size of the current version's spill file (sparse: only written rows use disk)."""
        return self._storage.spilled_bytes

    @property
    def memory_rows(self) -> int:
        """Rows `0 .. memory_rows - 1` live in memory, the rest in the spill file."""
        return self._storage.memory_rows

    def _spill_path(self, version: int) -> Path:
        return self.spill_dir / f"{self.name}-v{version}.bin"

    def _new_storage(
        self, sample_shape: tuple[int, ...], dtype: torch.dtype, version: int
    ) -> _Storage:
        return _Storage(
            self.num_samples,
            tuple(int(d) for d in sample_shape),
            dtype,
            self.budget_bytes,
            self.block_bytes,
            self._spill_path(version),
        )

    def _check_indices(self, indices: torch.Tensor, *, unique: bool) -> torch.Tensor:
        idx = torch.as_tensor(indices)
        if idx.dim() != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(idx.shape)}")
        if idx.dtype == torch.bool or idx.is_floating_point() or idx.is_complex():
            raise ValueError(f"indices must be integers, got {idx.dtype}")
        idx = idx.to(device="cpu", dtype=torch.long)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.num_samples):
            raise IndexError(f"sample index out of range [0, {self.num_samples})")
        if unique and torch.unique(idx).numel() != idx.numel():
            raise ValueError("indices must not repeat")
        return idx

    # --- API -------------------------------------------------------------------------------

    def lookup(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values for the indices that are filled, bool mask of which indices were filled).

        Values have shape (len(indices), *sample_shape) on CPU; rows whose mask is False are
        unspecified (uninitialised memory). Repeated indices are allowed.
        """
        idx = self._check_indices(indices, unique=False)
        values = torch.empty((len(idx), *self.sample_shape), dtype=self.dtype)
        mask = self._filled[idx]
        if bool(mask.any()):
            positions = mask.nonzero().squeeze(1)
            self._storage.read_into(values, positions, idx[positions])
        return values, mask

    def store(self, indices: torch.Tensor, values: torch.Tensor, frozen_layers: int) -> None:
        """Fill rows; frozen_layers must equal the current version (else ValueError).

        Values are detached, moved to the CPU and stored bit-exactly (no dtype conversion).
        Refilling an already filled row overwrites it.
        """
        if frozen_layers != self._version:
            raise ValueError(
                f"stale producer: values belong to freeze point {frozen_layers}, "
                f"cache is at {self._version}"
            )
        if self._version == 0:
            raise ValueError("nothing is frozen (version 0); call advance() before store()")
        idx = self._check_indices(indices, unique=True)
        values = values.detach().to("cpu").contiguous()
        if values.dim() == 0 or values.shape[0] != len(idx):
            raise ValueError(
                f"values shape {tuple(values.shape)} does not match {len(idx)} indices"
            )
        shape = tuple(values.shape[1:])
        if not self._storage.matches(shape, values.dtype):
            if self._num_filled:
                raise ValueError(
                    f"values are {_dtype_name(values.dtype)}{list(shape)}, cache version "
                    f"{self._version} holds {_dtype_name(self.dtype)}{list(self.sample_shape)}"
                )
            logger.info(
                "cache version %d (empty) takes row layout %s%s from the first store",
                self._version,
                _dtype_name(values.dtype),
                list(shape),
            )
            self._storage.release()
            self._storage = self._new_storage(shape, values.dtype, self._version)
        self._storage.write(idx, values)
        new = ~self._filled[idx]
        self._num_filled += int(new.sum())
        self._filled[idx] = True

    def advance(
        self,
        new_frozen_layers: int,
        compute: Callable[[torch.Tensor], torch.Tensor] | None,
        chunk: int = 256,
        *,
        sample_shape: tuple[int, ...] | None = None,
    ) -> None:
        """Move to version `new_frozen_layers` (> current: freezing only grows, else ValueError).

        With `compute` (runs the newly frozen layers on a batch of old rows, under no_grad), every
        filled row is transformed `chunk` rows at a time into the new storage; old memory blocks
        are freed as soon as all their rows have been transformed and the old spill file is
        deleted at the end, so memory peaks at about max(old, new) + one block + one chunk. The
        new per-sample shape and dtype are those `compute` returns (`sample_shape`, if given,
        must agree). Rows not filled stay unfilled.

        With `compute=None` the new version starts empty, with `sample_shape` if given (else the
        current shape; an empty version also takes the layout of its first `store`).

        If `compute` raises, the new version is discarded and the cache stays at the old version,
        minus any rows whose memory was already freed; the exception propagates.
        """
        if new_frozen_layers <= self._version:
            raise ValueError(
                f"freeze point must grow: cache is at {self._version}, got {new_frozen_layers}"
            )
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        old = self._storage
        if compute is None or self._num_filled == 0:
            shape = tuple(sample_shape) if sample_shape is not None else old.sample_shape
            old.release()
            self._storage = self._new_storage(shape, old.dtype, new_frozen_layers)
            self._filled.zero_()
            self._num_filled = 0
            logger.info("cache version %d -> %d: starting empty", self._version, new_frozen_layers)
            self._version = new_frozen_layers
            return

        started = time.perf_counter()
        rows = self._filled.nonzero().squeeze(1)  # ascending, so old blocks empty in order
        new: _Storage | None = None
        try:
            for start in range(0, len(rows), chunk):
                idx = rows[start : start + chunk]
                with torch.no_grad():
                    out = compute(old.read(idx))
                out = out.detach().to("cpu").contiguous()
                if out.dim() == 0 or out.shape[0] != len(idx):
                    raise ValueError(
                        f"compute returned shape {tuple(out.shape)} for {len(idx)} rows"
                    )
                shape = tuple(out.shape[1:])
                if new is None:
                    if sample_shape is not None and tuple(sample_shape) != shape:
                        raise ValueError(
                            f"compute returned rows of shape {list(shape)}, "
                            f"expected {list(sample_shape)}"
                        )
                    new = self._new_storage(shape, out.dtype, new_frozen_layers)
                elif not new.matches(shape, out.dtype):
                    raise ValueError(
                        f"compute returned {_dtype_name(out.dtype)}{list(shape)} after "
                        f"{_dtype_name(new.dtype)}{list(new.sample_shape)}"
                    )
                new.write(idx, out)
                del out
                end = start + chunk
                old.free_blocks_below(int(rows[end]) if end < len(rows) else self.num_samples)
        except BaseException:
            if new is not None:
                new.release()
            lost = int(self._filled[: old.freed_below].sum())
            if lost:
                self._filled[: old.freed_below] = False
                self._num_filled -= lost
            logger.warning(
                "cache advance %d -> %d failed; staying at version %d (%d rows lost)",
                self._version,
                new_frozen_layers,
                self._version,
                lost,
            )
            raise
        assert new is not None  # at least one row was filled
        old.release()
        self._storage = new
        logger.info(
            "cache version %d -> %d: transformed %d rows to %s%s in %.3f s "
            "(%d bytes resident, %d bytes spill file)",
            self._version,
            new_frozen_layers,
            self._num_filled,
            _dtype_name(new.dtype),
            list(new.sample_shape),
            time.perf_counter() - started,
            new.resident_bytes,
            new.spilled_bytes,
        )
        self._version = new_frozen_layers

    def clear(self) -> None:
        """Free everything (memory blocks and spill file); the version number is kept."""
        self._storage.release()
        self._storage = self._new_storage(self.sample_shape, self.dtype, self._version)
        self._filled.zero_()
        self._num_filled = 0

    def manifest(self) -> dict[str, Any]:
        """A JSON-able description of the cache: version, row layout, fill, where rows live."""
        in_memory = int(self._filled[: self.memory_rows].sum())
        return {
            "format": MANIFEST_FORMAT,
            "frozen_layers": self._version,
            "num_samples": self.num_samples,
            "filled": self._num_filled,
            "filled_in_memory": in_memory,
            "filled_spilled": self._num_filled - in_memory,
            "budget_bytes": self.budget_bytes,
            "spill_dir": str(self.spill_dir),
            **self._storage.describe(),
        }
