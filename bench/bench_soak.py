"""Soak: a long elastic run; resident memory and open files of every rank over time.

    python bench/bench_soak.py --minutes 20

vit-digits on 2 ranks × 100 MiB with AutoFreeze and AutoCache: 2×1, transitions to 1×2 as
layers freeze, then epochs in the final layout until Ctrl-C (SIGINT) after --minutes. Every
10 s the RSS (from /proc/PID/status) and the open file descriptors of each rank are sampled.
Target: each rank's RSS stays within 10 % of its level after the first minute (by then the
layout has settled); no growth in file handles; no process left after the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeplan.formats import EpochRecord, PhaseRecord, read_records  # noqa: E402


def children(pid: int) -> list[int]:
    """All descendants of `pid` (the ranks and their helpers)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            kids.append(int(entry.name))
            kids.extend(children(int(entry.name)))
    return kids


def rank_processes(pid: int) -> list[int]:
    out = []
    for child in children(pid):
        try:
            # `pipeplan run` starts `python -m executor.launch RUN_DIR` per rank.
            if b"executor.launch" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
        except OSError:
            pass
    return sorted(out)


def sample(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
    return rss_kib * 1024, len(list(Path(f"/proc/{pid}/fd").iterdir()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    args = parser.parse_args()
    epochs = 100_000  # stopped by Ctrl-C (SIGINT) after --minutes: that path is tested too
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-c",
            "import sys, cli; sys.exit(cli.main())",
            "run",
            "--model",
            "vit-digits",
            "--nproc",
            "2",
            "--device-memory",
            "100MiB",
            "--epochs",
            str(epochs),
            "--name",
            "soak",
            "--runs-dir",
            tmp,
        ]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started, series = time.monotonic(), {}
        while proc.poll() is None:
            time.sleep(10)
            if time.monotonic() - started > args.minutes * 60:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)
                break
            for pid in rank_processes(proc.pid):
                with contextlib.suppress(OSError):  # a rank that just exited
                    series.setdefault(pid, []).append((time.monotonic() - started, *sample(pid)))
        stderr = proc.stderr.read().decode()
        leftover = rank_processes(proc.pid)
        records = read_records(Path(tmp) / "soak" / "run.jsonl")
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    print(
        f"run exit code {proc.returncode} (130: stopped by SIGINT as planned); "
        f"{sum(isinstance(r, EpochRecord) for r in records)} epochs in "
        f"{time.monotonic() - started:.0f} s; layouts: "
        f"{[p.layout.label() for p in phases]}"
    )
    if proc.returncode and stderr.strip():
        print(stderr.strip().splitlines()[-1])
    # The layout settles within the first minute (see the layouts above): the baseline.
    for index, (_, points) in enumerate(sorted(series.items())):
        rss = [p[1] for p in points]
        fds = [p[2] for p in points]
        settled = [p for p in points if p[0] >= 60.0]
        base = settled[0][1] if settled else rss[0]
        worst = max(abs(r - base) / base for _, r, _ in settled) if settled else 0.0
        verdict = "meets" if worst <= 0.10 else "MISSES"
        print(
            f"rank process {index}: RSS first {rss[0] / 2**20:.0f} MiB, after the first minute "
            f"{base / 2**20:.0f} MiB, max {max(rss) / 2**20:.0f} MiB, last {rss[-1] / 2**20:.0f} "
            f"MiB; worst drift {worst:.1%} ({verdict} 10 %); open files {min(fds)}–{max(fds)}"
        )
        curve = [(round(t), round(r / 2**20)) for t, r, _ in points[:: max(1, len(points) // 12)]]
        print(f"  curve (s, MiB): {json.dumps(curve)}")
    print(f"processes left after the run: {len(leftover)}")


if __name__ == "__main__":
    main()
