"""CPU per test of a pytest run, to see where the default suite's time goes.

As a pytest plugin it records, for each test, the CPU of the worker and of the children it
waited for (ranks, CLI subprocesses) with its wall time, one JSON row per test into
$CPU_PER_TEST_DIR (a file per worker); as a script it sums the rows by file and lists the
costliest tests:

    CPU_PER_TEST_DIR=/tmp/cpt PYTHONPATH=bench python -m pytest -q -p cpu_per_test
    python bench/cpu_per_test.py /tmp/cpt 60
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


try:  # a plugin only where pytest is there: the script's summary needs none
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

if pytest is not None:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        own, children = _cpu()
        start = time.monotonic()
        yield
        own_after, children_after = _cpu()
        row = {
            "id": item.nodeid,
            "self": own_after - own,
            "child": children_after - children,
            "wall": time.monotonic() - start,
        }
        folder = Path(os.environ.get("CPU_PER_TEST_DIR", "cpu-per-test"))
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"rows.{os.getpid()}.jsonl").open("a") as out:
            out.write(json.dumps(row) + "\n")


def main(folder: str, top: int = 40) -> None:
    rows = [json.loads(line) for f in Path(folder).glob("rows.*.jsonl") for line in f.open()]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        total = by_file[row["id"].split("::")[0]]
        total[0] += row["self"]
        total[1] += row["child"]
        total[2] += 1
    cpu = sum(t[0] + t[1] for t in by_file.values())
    print(f"{len(rows)} tests, {cpu:.0f} s of CPU")
    for name, (own, child, n) in sorted(by_file.items(), key=lambda kv: -sum(kv[1][:2])):
        print(f"{own + child:8.1f} s CPU ({own:.1f} own, {child:.1f} children), {n} tests  {name}")
    print(f"--- the {top} costliest tests (CPU s, wall s)")
    for row in sorted(rows, key=lambda r: -(r["self"] + r["child"]))[:top]:
        print(f"{row['self'] + row['child']:7.1f} {row['wall']:7.1f}  {row['id']}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
