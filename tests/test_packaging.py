"""A non-editable install works: the wheel carries the shipped profiles, and they are found."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Build from a copy: pip builds in the source tree, and a stale build/ there leaks into wheels.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", "build", "runs", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", ".venv"
)


def pip(*args: str, cwd: Path) -> None:
    # --no-index: everything is local, and a bare name must never be fetched from an index.
    command = [sys.executable, "-m", "pip", *args, "--no-index", "--no-deps"]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, tmp / "src", ignore=NOT_SOURCE)
    # No build isolation: setuptools is installed here, and the build needs no network.
    # A path, not "src": pip would take a bare word for a package name.
    pip("wheel", "--no-build-isolation", "-w", str(tmp / "dist"), str(tmp / "src"), cwd=tmp)
    (built,) = (tmp / "dist").glob("pipeplan-*.whl")
    return built


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_carries_every_shipped_profile(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"profiles/{p.name}" for p in (ROOT / "profiles").glob("*.json")}
    assert shipped and shipped <= names
    assert "profiles/__init__.py" in names


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_installed_wheel_finds_its_profiles_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    pip("install", "--target", str(site), str(wheel), cwd=tmp_path)
    # Where every package came from too: an editable install's finder resolves a subpackage
    # the wheel lacks (pipeplan.formats was missing) from the checkout it points at.
    code = (
        "import cli, pipeplan.formats; from executor.planning import shipped_profile; "
        "print(shipped_profile('vit-digits', 'cpu')); print(cli.__file__); "
        "print(pipeplan.formats.__file__)"
    )
    # Only the installed copy on the path, run from elsewhere: nothing can fall back on ROOT.
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    profile, *modules = done.stdout.split()
    assert Path(profile) == site / "profiles" / "vit-digits@cpu-1t.json"
    assert [Path(m) for m in modules] == [site / "cli.py", site / "pipeplan/formats/__init__.py"]


@pytest.mark.timeout(120)
def test_the_suite_keeps_no_passing_test_s_folder(tmp_path):
    """A test's tmp_path often holds a copy of a run (30 MB and more). pytest keeps every one of
    three sessions by default; they filled a CI machine's disk mid-suite (2026-12-05). Under the
    project's settings a passing test's folder is gone when it ends, and a failing one's kept."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "def test_passes(tmp_path):\n    (tmp_path / 'run.bin').write_bytes(b'x' * 4096)\n\n"
        "def test_fails(tmp_path):\n    (tmp_path / 'run.bin').write_bytes(b'x' * 4096)\n"
        "    assert False\n"
    )
    root = tmp_path / "temproot"
    root.mkdir()
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")]
    command += ["--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-n", "0", "-m", ""]
    done = subprocess.run(
        [*command, str(probe)],
        env={**os.environ, "PYTEST_DEBUG_TEMPROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    kept = sorted(p.parent.name for p in root.rglob("run.bin"))
    assert kept == ["test_fails0"]


def test_the_suites_collector_is_on_while_tests_run():
    """conftest turns the cyclic collector off for the session's imports and freezes them out
    of its passes once the tests are collected: on again for every test (a test's cyclic
    garbage is freed), the imports' objects frozen."""
    import gc

    assert gc.isenabled() and gc.get_freeze_count() > 100_000, gc.get_freeze_count()


@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "expression, long_kept",
    [("not multiprocess", False), ("long", True)],
)
def test_a_marker_expression_takes_in_long_tests_only_when_it_names_them(expression, long_kept):
    """`-m "not multiprocess"`, the README's quick run, replaced pyproject's `-m 'not long'`
    and took in long tests that start no ranks (the fifty-sixth round). A long test is in only
    where the expression names long, or is empty (`-m ""`, every test: the hostile count's)."""
    long_test = "test_text.py::test_a_huge_line_is_cut_before_the_tokenizer_sees_it"
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    done = subprocess.run(
        [*command, "-m", expression, "-p", "no:cacheprovider", "tests/test_text.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (long_test in done.stdout) == long_kept, done.stdout
    assert "test_text.py::" in done.stdout  # the file's other tests are collected either way


def test_no_module_defines_a_top_level_name_twice():
    """A second `def` of a name replaces the first for every caller in the module, in silence
    (ruff says nothing where the uses are inside functions): the fiftieth session's new
    `_module_file(name)` in executor/data.py replaced the one `_made_by_its_library` calls,
    and joblib's own patch of the standard library was refused as the user's."""
    import ast
    import collections

    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    files = [ROOT / "cli.py", *sorted(ROOT.glob("pipeplan/**/*.py"))]
    files += sorted(ROOT.glob("executor/*.py")) + sorted(ROOT.glob("profiles/*.py"))
    twice = {}
    for file in files:
        body = ast.parse(file.read_text()).body
        counts = collections.Counter(node.name for node in body if isinstance(node, kinds))
        if names := sorted(name for name, n in counts.items() if n > 1):
            twice[str(file.relative_to(ROOT))] = names
    assert len(files) > 40 and twice == {}
