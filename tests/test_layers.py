"""The data path runs one way (docs/architecture.md §2): formats ← planner ← executor ←
analysis ← top. A module imports only modules of its own layer or of layers below it; the
check reads every import statement, function-local ones included."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [  # bottom first
    (
        "base",
        [
            "pipeplan",
            "pipeplan.errors",
            "pipeplan.fileio",
            "pipeplan.spawn",
            "pipeplan.log",
            "pipeplan.startup",
        ],
    ),
    ("formats", ["pipeplan.formats"]),
    (
        "planner",
        [
            f"pipeplan.{name}"
            for name in [
                "models",
                "profiler",
                "precision",
                "links",
                "cluster",
                "costmodel",
                "simulate",
                "partition",
                "solver",
                "freeze",
                "plan",
                "inputs",
                "synthetic",
                "exits",
            ]
        ],
    ),
    (
        "executor",
        [
            "executor",
            *(
                f"executor.{name}"
                for name in [
                    "worker",
                    "parallel",
                    "feed",
                    "topology",
                    "clock",
                    "migrate",
                    "cache",
                    "checkpoint",
                    "history",
                    "data",
                    "text",
                    "task",
                    "planning",
                    "progress",
                    "faults",
                    "demotasks",
                ]
            ),
        ],
    ),
    ("analysis", ["pipeplan.calibrate", "pipeplan.report", "pipeplan.plots", "pipeplan.runfiles"]),
    (
        "top",
        [
            "cli",
            "pipeplan.options",
            "pipeplan.api",
            "executor.launch",
            "executor.demo",
            "executor.demo_checkpoint",
        ],
    ),
]


def layer_of(module: str) -> int | None:
    """Index of the layer a project module belongs to (longest matching prefix); None for a
    module outside the project (torch, numpy, …)."""
    best, index = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package: str) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative: resolve against the importing package
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


SOURCES = sorted(
    [ROOT / "cli.py", *(ROOT / "pipeplan").rglob("*.py"), *(ROOT / "executor").rglob("*.py")]
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    module = module_name(path)
    mine = layer_of(module)
    assert mine is not None, f"{module} is in no layer: add it to LAYERS and to §2 of the docs"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    upward = sorted(
        f"{name} ({LAYERS[other][0]})"
        for name in imported(ast.parse(path.read_text()), package)
        if (other := layer_of(name)) is not None and other > mine
    )
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports upward: {', '.join(upward)}"


def test_the_layer_list_names_real_modules():
    known = {module_name(p) for p in SOURCES}
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            assert any(m == prefix or m.startswith(prefix + ".") for m in known), prefix
