"""One launch path: `pipeplan run` starts its ranks through torch's elastic launcher, torchrun
runs the same worker (the README's commands, verbatim), and every fault ends the run with its
exit code and exactly one line naming the rank that failed first."""

import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import rank_processes

from executor import faults
from executor.launch import INTERRUPTED, RANK_SHELL
from executor.worker import StartAbandoned
from pipeplan.errors import Interrupted, Stopped
from pipeplan.formats import EpochRecord, PhaseRecord, read_records
from pipeplan.spawn import free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PIPEPLAN = [sys.executable, "-m", "cli"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def environment(**extra: str) -> dict[str, str]:
    """This interpreter's environment, the checkout first on the path, and test switches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPEPLAN_TEST_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


# tests/faultsite: a `sitecustomize` that wraps one function of pipeplan's in a rank as the
# rank starts, before anything holds pipeplan's modules: the fault PIPEPLAN_TEST_FAULT names.
# A data module's `load` that did it is refused ("the data function replaced
# executor.checkpoint.save": `data.functions_kept`; `data.rank_held` once the rank trains).
FAULT_SITE = ROOT / "tests" / "faultsite"


def fault(name: str, paused: Path) -> dict[str, str]:
    """`start_run`'s environment for a run whose rank brings in the fault `name` of
    tests/faultsite/sitecustomize.py, which touches `paused` as it strikes."""
    return {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{FAULT_SITE}",
        "PIPEPLAN_TEST_FAULT": name,
        "PIPEPLAN_TEST_PAUSED": str(paused),
    }


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the run ended before it paused"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# ----------------------------------------------------------------------------- the README


@pytest.mark.timeout(120)
def test_the_launchers_process_does_not_import_the_training_code():
    """`pipeplan run`'s own process imports `executor.launch` to start the ranks; the
    training code (`executor.worker`: torch's pipelining, dynamo and DTensor, ~1.2 s of CPU)
    is the ranks' alone, imported in a rank's `main`."""
    probe = (
        "import sys, executor.launch\n"
        "print(sorted(m for m in ('executor.worker', 'executor.parallel',"
        " 'torch.distributed.pipelining') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0 and done.stdout == "[]\n", (done.stdout, done.stderr)


@pytest.mark.timeout(120)
def test_a_rank_collects_once_its_imports_are_in_and_a_launcher_as_it_was():
    """A rank imports torch and its training code with the cyclic collector off, then freezes
    those objects out of its passes and turns it on (`_IMPORTS_UNCOLLECTED`): on again before
    anything of the run's, or a long run's cyclic garbage is never freed. A process that only
    imports the module (a launcher) keeps its collector as it was."""
    probe = (
        "import gc, runpy, sys\n"
        "import executor.launch\n"
        "launcher = (gc.isenabled(), gc.get_freeze_count())\n"
        "sys.argv = ['executor.launch', '--help']  # `main` exits as it parses, once imported\n"
        "try:\n"
        "    runpy.run_module('executor.launch', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(launcher, gc.isenabled(), gc.get_freeze_count() > 100_000)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "(True, 0) True True", (done.stdout, done.stderr)


def _ignore_hangup_and_interrupt() -> None:  # as `nohup` (SIGHUP) and a background job
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_ranks_start_wait_is_bounded_under_either_launcher(monkeypatch):
    """A rank of `pipeplan run` waited 24 h for one that never arrived alive (the sixty-sixth
    round's notes); now the run's --collective-timeout, START_FLOOR_S at least, as a rank's
    start may outlast a short timeout; under torchrun the --collective-timeout, said."""
    from executor import launch
    from executor.launch import LAUNCHER_PID, START_FLOOR_S, start_wait
    from pipeplan.formats import RunConfig

    assert START_FLOOR_S == 600.0
    short, long_ = (RunConfig(model="vit-digits", collective_timeout_s=t) for t in (5.0, 1800.0))
    monkeypatch.setenv(LAUNCHER_PID, str(os.getppid()))
    assert launch.under_pipeplan_run()
    assert [start_wait(c).limit_s for c in (short, long_)] == [START_FLOOR_S, 1800.0]
    assert not start_wait(short).say
    monkeypatch.delenv(LAUNCHER_PID)
    assert [start_wait(c).limit_s for c in (short, long_)] == [5.0, 1800.0]
    assert start_wait(short).say and "--collective-timeout" in start_wait(short).limit()


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_run_started_with_sighup_and_sigint_ignored_trains_through_them(tmp_path):
    """Found by the sixty-second round: `nohup pipeplan run …` (SIGHUP ignored, so that
    closing the terminal leaves the job) was stopped by SIGHUP, and an ignored SIGINT became
    `interrupted`: pipeplan's handlers, then torch's agent's, took over SIG_IGN. A signal
    ignored as the command starts stays ignored: both, sent throughout, leave the run to
    train to its end, exit 0. Found by the sixty-third round: the rank's, sent to it alone
    (`pkill -INT python`), failed the run, "interrupted by SIGINT": a rank took SIGINT over
    at its first statement. Now the rank keeps both ignored too (`launch.kept_ignored`)."""
    command = [*PIPEPLAN, "run", "--nproc", "1", "--epochs", "1", "--max-steps-per-epoch", "2"]
    run = subprocess.Popen(
        [*command, "--runs-dir", str(tmp_path), "--name", "k"],
        cwd=ROOT,
        env=environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_hangup_and_interrupt,
    )
    sent, rank = 0, {}
    while run.poll() is None:
        if sent % 4 == 0:  # the rank, once it has started (its shell first, then Python)
            rank = rank_processes(tmp_path / "k") or rank
        for pid in (run.pid, *rank.values()):
            with contextlib.suppress(ProcessLookupError):  # a rank that has ended
                os.kill(pid, (signal.SIGHUP, signal.SIGINT)[sent % 2])
        sent += 1
        time.sleep(0.05)
    err = run.stderr.read()
    assert run.returncode == 0 and sent > 20 and rank, (sent, rank, err)
    assert "stopped" not in err and "interrupted" not in err, err
    assert (tmp_path / "k" / "summary.json").exists()


def readme_torchrun_block() -> list[str]:
    """The shell lines of the README's torchrun block, continuation lines joined."""
    start = README.index("```sh\n", README.index("Across machines")) + len("```sh\n")
    block = README[start : README.index("```", start)]
    return [
        line.strip()
        for line in re.sub(r"\\\n\s*", "", block).splitlines()
        if line.strip() and not line.startswith("#")
    ]


def readme_commands(port: int, resume: bool = False) -> tuple[list[str], list[list[str]]]:
    """(prepare command, [torchrun on node 0, torchrun on node 1]) as the README writes them,
    HOST0:29500 replaced by 127.0.0.1 and a free port; the programs by this interpreter."""
    prepare, node0 = readme_torchrun_block()
    node0 = node0.replace("HOST0:29500", f"127.0.0.1:{port}") + " --resume" * resume
    node1 = node0.replace("--node-rank 0", "--node-rank 1")
    assert prepare.startswith("pipeplan ") and node0.startswith("torchrun ") and node1 != node0
    return PIPEPLAN + prepare.split()[1:], [TORCHRUN + n.split()[1:] for n in (node0, node1)]


def prepare_here(prepare: list[str], cwd: Path, monkeypatch, capsys) -> str:
    """`prepare` (`pipeplan run … --prepare-only`, as `readme_commands` gives it) run in this
    process in `cwd`, as the README's shell would in its own: what it printed. Its claim on
    the run is let go, as its process's end would, for torchrun's ranks to take; a prepare
    prints one line and no rank starts, so a process of its own (~5 CPU-s of imports) shows
    nothing more."""
    import cli
    from pipeplan.fileio import release_directory

    assert prepare[: len(PIPEPLAN)] == PIPEPLAN
    capsys.readouterr()
    with monkeypatch.context() as here:
        here.chdir(cwd)
        code = cli.main(prepare[len(PIPEPLAN) :])
    out, err = capsys.readouterr()
    assert code == 0, err
    release_directory(cwd / "runs" / "exp1")
    return out


def start_agents(commands: list[list[str]], cwd: Path, port: int, node1_env=None) -> list:
    """Both torchrun agents, each the leader of its own process group; node 0 first, so that
    it hosts the rendezvous store."""
    logs = [open(cwd / f"agent{i}.log", "w") for i in range(2)]  # noqa: SIM115
    agents = []
    for i, (command, log) in enumerate(zip(commands, logs, strict=True)):
        env = environment(**(node1_env or {})) if i == 1 else environment()
        agents.append(
            subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        if i == 0:
            deadline = time.monotonic() + 60
            while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                assert time.monotonic() < deadline and agents[0].poll() is None
                time.sleep(0.1)
    return agents


def final_model(run_dir: Path) -> dict[str, torch.Tensor]:
    pointer = (run_dir / "checkpoints" / "latest").read_text().strip()
    return torch.load(run_dir / "checkpoints" / pointer / "model.pt", weights_only=True)


def same_parameters(a: Path, b: Path) -> bool:
    first, second = final_model(a), final_model(b)
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """`pipeplan run --nproc 2` with the README's flags: the parameters torchrun must reach.
    Run by this process (`cli.main`, as conftest's `finished_run`), in a folder of its own:
    its ranks are processes of their own, as ever; only the launcher's own start is spared."""
    import cli
    from pipeplan.fileio import release_directory

    cwd = tmp_path_factory.mktemp("local")
    prepare, _ = readme_commands(free_port())
    command = [a for a in prepare if a != "--prepare-only"]
    assert command[: len(PIPEPLAN)] == PIPEPLAN
    was = Path.cwd()
    os.chdir(cwd)
    try:
        assert cli.main(command[len(PIPEPLAN) :]) == 0
    finally:
        os.chdir(was)
    release_directory(cwd / "runs" / "exp1")
    return cwd / "runs" / "exp1"


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_the_readme_torchrun_commands_train_like_pipeplan_run(
    tmp_path, reference, monkeypatch, capsys
):
    """The README's two torchrun agents (2 nodes of 1 rank) train bitwise as `pipeplan run
    --nproc 2` does. Found by the thirty-eighth round: without --plan, their run planned and
    recorded every phase for 1 node of 2 devices; its phases now record the 2 nodes of 1
    device torchrun started (the layouts, and so the parameters, are the same here)."""
    port = free_port()
    prepare, nodes = readme_commands(port)
    out = prepare_here(prepare, tmp_path, monkeypatch, capsys)
    assert f"-m executor.launch {Path('runs') / 'exp1'}" in out  # the printed command
    agents = start_agents(nodes, tmp_path, port)
    codes = [agent.wait(timeout=400) for agent in agents]
    assert codes == [0, 0], (tmp_path / "agent0.log").read_text()[-3000:]
    run_dir = tmp_path / "runs" / "exp1"
    assert (run_dir / "summary.json").exists()  # rank 0 summarised, as under pipeplan run
    assert same_parameters(run_dir, reference)
    for run, nodes in ((run_dir, (2, 1)), (reference, (1, 2))):
        phases = [r for r in read_records(run / "run.jsonl") if isinstance(r, PhaseRecord)]
        clusters = {(p.pricing.cluster.nodes, p.pricing.cluster.devices_per_node) for p in phases}
        assert phases and clusters == {nodes}, (run, clusters)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_the_printed_torchrun_command_waits_for_a_missing_node_at_most_the_runs_timeout(
    tmp_path, monkeypatch, capsys
):
    """Found by the fortieth round: with one of two nodes never started, torchrun's c10d
    rendezvous started no rank (so no pipeplan line) for torch's join_timeout of 600 s,
    whatever the run's --collective-timeout. The command `--prepare-only` prints bounds it
    by the run's: torchrun gives up with its own error, and nothing of the run has started."""
    port = free_port()
    prepare, _ = readme_commands(port)
    out = prepare_here([*prepare, "--collective-timeout", "3"], tmp_path, monkeypatch, capsys)
    (printed,) = [line for line in out.splitlines() if line.startswith("torchrun ")]
    assert "--rdzv-conf=join_timeout=3,last_call_timeout=1" in printed
    for name, value in (("NODES", "2"), ("RANKS_PER_NODE", "1"), ("NODE", "0")):
        printed = re.sub(rf"\b{name}\b", value, printed)
    command = TORCHRUN + printed.replace("HOST0:29500", f"127.0.0.1:{port}").split()[1:]
    started = time.monotonic()
    alone = subprocess.run(
        command, cwd=tmp_path, env=environment(), capture_output=True, timeout=150
    )
    assert alone.returncode != 0
    assert time.monotonic() - started < 3 + 60  # the join timeout, torchrun's start and exit
    assert b"RendezvousTimeoutError" in alone.stderr
    assert not (tmp_path / "runs" / "exp1" / "run.jsonl").exists()  # no rank ever started


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_nodes_prepared_with_other_flags_are_refused_before_they_train(
    tmp_path, monkeypatch, capsys
):
    """Found by the fifty-third round: two nodes whose copies of the run were prepared with
    another --lr (or --seed) trained one run under both, rank 0's run.json stating its own
    rate; another --global-batch ended in torch's shape error. Each rank holds its run.json
    and data.json to rank 0's once the job has met: one line, naming the field, on both
    nodes; nothing recorded."""
    port = free_port()
    prepare, nodes = readme_commands(port)
    folders = [tmp_path / "node0", tmp_path / "node1"]
    for folder, extra in zip(folders, ([], ["--lr", "0.002"]), strict=True):
        folder.mkdir()
        prepare_here([*prepare, *extra], folder, monkeypatch, capsys)
    agents = []
    for command, folder in zip(nodes, folders, strict=True):
        log = open(folder / "agent.log", "w")  # noqa: SIM115
        agents.append(
            subprocess.Popen(
                command, cwd=folder, env=environment(), stdout=log, stderr=subprocess.STDOUT
            )
        )
    codes = [agent.wait(timeout=240) for agent in agents]
    logs = [(folder / "agent.log").read_text() for folder in folders]
    assert codes[0] != 0 and codes[1] != 0, logs
    said = "run.json: rank 1's differs from rank 0's: lr 0.002 there, 0.001 on rank 0"
    for rank, text in enumerate(logs):
        ours = [line for line in text.splitlines() if line.startswith("pipeplan: error:")]
        assert len(ours) == 1 and ours[0].startswith(f"pipeplan: error: rank {rank}: ")
        assert said in ours[0], ours
    for folder in folders:
        assert not (folder / "runs" / "exp1" / "run.jsonl").exists()


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_killing_one_agent_stops_the_other_and_the_run_resumes_under_torchrun(tmp_path, reference):
    port = free_port()
    prepare, nodes = readme_commands(port)
    extra = ["--data", "tests.killer_data:digits_pause_once", "--checkpoint-every", "2"]
    assert (
        subprocess.run([*prepare, *extra], cwd=tmp_path, env=environment(), timeout=120).returncode
        == 0
    )
    paused = tmp_path / "paused"
    # Node 1's rank pauses in epoch 1's evaluation, after the checkpoint of step 2: at 300
    # reads the run (3 steps an epoch, eval reads chunked since) had ended without pausing.
    pause = {"PIPEPLAN_TEST_PAUSE_AFTER": "100", "PIPEPLAN_TEST_PAUSED": str(paused)}
    agents = start_agents(nodes, tmp_path, port, node1_env=pause)
    wait_for(paused, agents[0])
    run_dir = tmp_path / "runs" / "exp1"
    assert (run_dir / "checkpoints" / "latest").exists()
    assert len(rank_processes(run_dir)) == 2
    killed = time.monotonic()
    os.killpg(agents[1].pid, signal.SIGKILL)
    assert agents[0].wait(timeout=60) != 0
    assert time.monotonic() - killed < 60
    deadline = time.monotonic() + 10  # the kernel kills the orphaned rank (PR_SET_PDEATHSIG)
    while rank_processes(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rank_processes(run_dir) == {}

    _, resumed = readme_commands(port := free_port(), resume=True)
    agents = start_agents(resumed, tmp_path, port)
    codes = [agent.wait(timeout=400) for agent in agents]
    assert codes == [0, 0], (tmp_path / "agent0.log").read_text()[-3000:]
    assert same_parameters(run_dir, reference)


# ----------------------------------------------------------------------------- faults


def start_run(
    tmp_path: Path, *args: str, nproc: int = 2, epochs: int = 1, freeze: str = "none", **env: str
) -> subprocess.Popen:
    """`pipeplan run` on `nproc` ranks in a process of its own, its stderr piped."""
    command = [*PIPEPLAN, "run", "--nproc", str(nproc), "--epochs", str(epochs), "--freeze", freeze]
    return subprocess.Popen(
        [*command, *args, "--runs-dir", str(tmp_path), "--name", "k"],
        cwd=ROOT,
        env=environment(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def paused_run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """A run whose rank 1 has paused mid-step; returns it and rank 1's pid."""
    paused = tmp_path / "paused"
    run = start_run(
        tmp_path,
        "--data",
        "tests.killer_data:digits_pause_once",
        *args,
        PIPEPLAN_TEST_PAUSE_AFTER="200",
        PIPEPLAN_TEST_PAUSE_RANK="1",
        PIPEPLAN_TEST_PAUSED=str(paused),
    )
    wait_for(paused, run)
    return run, rank_processes(tmp_path / "k")[1]


def one_line(run: subprocess.Popen, code: int, pattern: str, timeout: float = 120) -> str:
    """The run's whole stderr is one line matching `pattern`, and its exit code is `code`."""
    _, err = run.communicate(timeout=timeout)
    assert run.returncode == code, err
    assert len(err.splitlines()) == 1 and re.fullmatch(pattern, err.strip()), err
    return err


def no_rank_left(tmp_path: Path) -> bool:
    return rank_processes(tmp_path / "k") == {}


AT = r" at step \d+"  # where it failed, before why
LOGS = r"; rank logs in .*/k/logs"
# What a failed run with no checkpoint says to do (twenty-sixth round).
NO_CHECKPOINT = r"; no checkpoint to resume from: delete .*/k to start it again"


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "data, name, split, at",
    [
        ("digits_then_raise", "digits-raise", "train", AT),
        # the epoch's evaluation, after its last step (a 1-epoch run: no epoch record yet);
        # long, for the 15-minute default run: test_hostile_data's
        # `test_an_evaluation_failure_is_placed_after_the_epochs_last_step` places it there
        pytest.param(
            "digits_then_eval_raise",
            "digits-eval-raise",
            "eval",
            r" after step \d+, at the end of epoch 1",
            marks=pytest.mark.long,
        ),
    ],
)
def test_a_rank_that_raises_is_named_with_its_error(tmp_path, data, name, split, at):
    """Found by the thirty-fifth round: a rank's read of an item that raised said "training
    failed on rank 1 at step 2: ValueError: sample 527 is unreadable": no data, no split, no
    item, where the launcher's own read says all three. The line now says what the
    launcher's does: "data 'digits-raise': reading train item 527 raised ValueError: …",
    for the training's reads and the evaluation's; the rank's log keeps the traceback of
    the user's code."""
    run = start_run(tmp_path, "--data", f"tests.killer_data:{data}")
    err = one_line(
        run,
        2,
        r"pipeplan: error: training failed on rank 1" + at + f": data '{name}': reading {split} "
        r"item (\d+) raised ValueError: sample (\d+) is unreadable" + LOGS + NO_CHECKPOINT,
    )
    item, sample = re.search(r"item (\d+) raised ValueError: sample (\d+)", err).groups()
    assert item == sample  # the item the rank read, as the data's own message says
    assert no_rank_left(tmp_path)
    log = (tmp_path / "k" / "logs" / "rank-1.log").read_text()
    assert "Traceback" in log and 'raise ValueError(f"sample {index} is unreadable")' in log


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "rank, after",
    [
        ("1", "1"),  # rank 1 alone, from its second read, as the ranks check their data
        # every rank, mid-run: nobody is left waiting in a collective to time out
        pytest.param(None, "200", marks=pytest.mark.long),
    ],
)
def test_a_rank_hung_in_its_data_code_ends_the_run_naming_the_read(tmp_path, rank, after):
    """Found by the forty-sixth round: a rank whose `__getitem__` never returned kept its
    heartbeat thread beating, so the others waited for it as for slow one-sided work: the run
    ran on, silent, for minutes, and a run whose ranks all hung in their data until `timeout`
    killed it. A read of the user's data that has not returned within the collective timeout
    now ends its rank with a report naming the data and the item (`data.hung_read`), as a
    read that raised is named: exit 2, one line, no rank left."""
    paused = tmp_path / "paused"
    env = {"PIPEPLAN_TEST_PAUSE_AFTER": after, "PIPEPLAN_TEST_PAUSED": str(paused)}
    if rank is not None:
        env["PIPEPLAN_TEST_PAUSE_RANK"] = rank
    data = "tests.killer_data:digits_pause_once"
    run = start_run(tmp_path, "--data", data, "--collective-timeout", "3", **env)
    try:
        wait_for(paused, run)
        hung = time.monotonic()
        who = rank or r"\d"
        one_line(
            run,
            2,
            rf"pipeplan: error: training failed on rank {who}(?:{AT}| before the first step): "
            r"data 'digits': reading train item \d+ did not return within the collective "
            r"timeout of 3 s \(hung; --collective-timeout sets how long a read may take\)"
            + LOGS
            + NO_CHECKPOINT,
            timeout=60,
        )
        assert time.monotonic() - hung < 3 + 15  # the timeout, a heartbeat's second, a margin
        assert no_rank_left(tmp_path)
    finally:  # failing, the run would sleep on in its data for an hour
        if run.poll() is None:
            run.terminate()
            run.wait(30)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "sig, what",
    [
        # long, for the 15-minute default run: `test_a_rank_that_exits_0_mid_run_is_named_not_
        # the_rank_that_noticed[2]` names the first rank to end by the same path, and
        # test_checkpoint's killed-and-resumed run SIGKILLs a rank
        pytest.param(signal.SIGKILL, "killed by SIGKILL", marks=pytest.mark.long),
        # Ctrl-C's own tests cover SIGINT to the ranks: long, for the 15-minute default run.
        pytest.param(signal.SIGINT, "interrupted by SIGINT", marks=pytest.mark.long),
    ],
)
def test_a_signalled_rank_is_named_not_the_rank_that_noticed(tmp_path, sig, what):
    run, rank1 = paused_run(tmp_path)
    os.kill(rank1, sig)
    one_line(
        run,
        2,
        r"pipeplan: error: training failed on rank 1" + AT + f": {what}" + LOGS + NO_CHECKPOINT,
    )
    assert no_rank_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "nproc",
    [
        2,
        # every rank exiting 0 is torch's agent's success: summary.json was missing
        pytest.param(1, marks=pytest.mark.long),
    ],
)
def test_a_rank_that_exits_0_mid_run_is_named_not_the_rank_that_noticed(tmp_path, nproc):
    """Found by the thirtieth round: a rank whose data code called `os._exit(0)` mid-run was
    taken by torch's agent for a rank that succeeded, and the line blamed rank 0 for a
    "Connection reset by peer" (one rank: "summary.json: no such file"). Its report's room,
    left until a rank's normal end, tells the launcher that it ended before the run did. The
    fifty-third round: called in an item's read, the line names the data and the item."""
    run = start_run(tmp_path, "--data", "tests.killer_data:digits_then_exit_0", nproc=nproc)
    one_line(
        run,
        2,
        rf"pipeplan: error: training failed on rank {nproc - 1}"
        + AT
        + r": data 'digits-exit-0': reading train item \d+ exited \(code 0\)"
        + LOGS
        + NO_CHECKPOINT,
    )
    assert no_rank_left(tmp_path)
    assert not list((tmp_path / "k" / "logs").glob("*.tmp"))  # the rooms removed as ever


def rank_1_of_2(script: str) -> subprocess.CompletedProcess:
    """`script` (Python, which calls `launch.main`) run as rank 1 of 2 under a torchrun-like
    environment, its output captured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPEPLAN_", "TORCHELASTIC"))}
    env.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )


@pytest.mark.timeout(120)
def test_a_torchrun_rank_whose_code_calls_os_exit_0_is_named(tmp_path):
    """Found in the thirty-first round's notes: under torchrun (no launcher of ours to find
    the report's room) a rank whose data code called `os._exit(0)` mid-run vanished in
    silence, and its peer was named for the connection it lost. While a rank trains, the
    call raises SystemExit (`data.exits_raised`): the rank's report and its line name it.
    A subprocess: were the call not caught, it would end pytest with status 0."""
    script = (
        "import os\n"
        "from executor import launch\n"
        "launch.train_rank = lambda run_dir, resume, console: os._exit(0)\n"
        f"launch.main([{str(tmp_path)!r}])\n"
    )
    done = rank_1_of_2(script)
    ours = [line for line in done.stderr.splitlines() if line.startswith("pipeplan: ")]
    assert done.returncode == 1, done.stderr[-3000:]
    assert ours == ["pipeplan: error: rank 1: exited with code 0 before the run ended"], ours


@pytest.mark.timeout(60)
def test_a_rank_ended_by_its_heartbeat_for_a_hung_read_prints_its_line(tmp_path):
    """Found by the forty-seventh round: under torchrun, rank 1 hung importing its data was
    ended by its heartbeat (`worker._Heartbeat.end_a_hung_read`) with its report written and
    nothing said: torchrun's summary alone, no line of pipeplan's. The rank prints its line,
    as one that raised does, to the console it had as the heartbeat started (the hung call
    holds descriptor 2: here /dev/null in its place). The fifty-first round: its node's
    /dev/shm cache (here a folder it made) is removed first, as a rank that raised removes it."""
    made = tmp_path / "node-cache"
    made.mkdir()
    (made / "rows").write_bytes(b"x")
    script = (
        "import os, time\n"
        "from pathlib import Path\n"
        "import torch.distributed as dist\n"
        "from executor import cache, data, worker\n"
        f"cache._MADE.append(Path({str(made)!r}))\n"
        "beat = worker._Heartbeat(dist.HashStore(), 'k', rank=1, timeout_s=2.0)\n"
        "null = os.open(os.devnull, os.O_WRONLY); os.dup2(null, 2)\n"
        "data._READING[:] = [time.monotonic() - 10, 'm:load', 'importing m', 0.0, 0.0]\n"
        "beat.end_a_hung_read()\n"
    )
    env = {**environment(), "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=50
    )
    assert (done.returncode, done.stderr.splitlines()) == (
        faults.EXIT_FAILED,
        [
            "pipeplan: error: rank 1: data 'm:load': importing m did not return within the "
            "collective timeout of 2 s (hung; --collective-timeout sets how long a read may take)"
        ],
    )
    assert not made.exists()


@pytest.mark.parametrize("cpu_in_gap", [0.0, 15.0], ids=["stopped", "computing"])
def test_a_process_stopped_past_the_timeout_is_not_its_datas_hang(monkeypatch, cpu_in_gap):
    """Found by the fifty-first round: every rank stopped (SIGSTOP, a suspended job) for
    longer than the collective timeout and continued ended blaming its data ("reading train
    item 75 did not return within …"), whose reads take 50 ms. A gap between two looks of
    the watch (each a second apart) in which the process took no CPU is a stop, not the
    read's time; one in which it computed (a C call that held the GIL) is the read's."""
    import time

    from executor import data

    now = time.monotonic()
    monkeypatch.setattr(data, "_LOOKED", [now - 20, time.process_time() - cpu_in_gap, 0.0])
    monkeypatch.setattr(data, "_READING", [now - 21, "m:load", "reading train item 75", 0.0, 0.0])
    hung = data.hung_read(10.0)
    if cpu_in_gap:
        assert hung is not None and "reading train item 75 did not return within" in hung
    else:
        assert hung is None  # 1 s of reading, 20 s of the process stopped
        data._READING[0] = time.monotonic() - 32  # and a read that then hangs is still seen
        assert "did not return within the collective timeout of 10 s" in data.hung_read(10.0)


@pytest.mark.timeout(60)
def test_a_torchrun_rank_ignores_an_interrupt_mark_it_was_not_given(tmp_path):
    """Found by the forty-seventh round: PIPEPLAN_INTERRUPTED naming any file that exists, set
    in torchrun's environment, made every rank exit 130 at its first statement, silently: the
    mark is `pipeplan run`'s, for its own ranks. A rank torchrun started goes on (here to its
    run directory, which is missing: its line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPEPLAN_", "TORCHELASTIC"))}
    env.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", PYTHONPATH=str(ROOT))
    mark = tmp_path / "interrupted"
    mark.write_text("")
    env["PIPEPLAN_INTERRUPTED"] = str(mark)
    done = subprocess.run(
        [sys.executable, "-m", "executor.launch", str(tmp_path / "none")],
        env=env, capture_output=True, text=True, timeout=50, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.splitlines() == [
        f"pipeplan: error: rank 1: {tmp_path / 'none' / 'run.json'}: no such file"
    ], done.stderr


# A rank's line for its data module's exit callback that called `os._exit(3)`.
EXITED = "the exit callback __main__.bye exited with code 3"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "trains, code, said",
    [
        # trained: its exit 0 kept, the callback's exit one warning line
        ("None", 0, [f"pipeplan: rank 1: WARNING: {EXITED}"]),
        # failed: its failure kept; the callbacks never run (no line of theirs)
        ("[][1]", 1, ["pipeplan: error: rank 1: IndexError: list index out of range"]),
    ],
)
def test_a_ranks_exit_callback_that_exits_never_sets_its_exit_code(tmp_path, trains, code, said):
    """Found by the thirty-eighth round: a rank runs atexit's callbacks itself as it ends
    (`launch.exit_without_teardown`), and a data module's callback that called `os._exit(3)`
    there turned a rank that had trained into a failure, exit 3, past its own flush. A
    callback that exits is now one that raises, as in the launcher (`cli._run_exit_callbacks`):
    one warning line (into the rank's log under `pipeplan run`), the rank's exit code its
    own. A failed rank exits without running them: `os._exit(0)` there cannot make it a
    success. The rank as torchrun runs it, its training replaced; a subprocess, as the callback
    ends the process."""
    script = (
        "import atexit, os\n"
        "from executor import launch\n"
        "def bye():\n"
        f"    os._exit({3 if code == 0 else 0})\n"
        "atexit.register(bye)\n"
        f"launch.train_rank = lambda run_dir, resume, console: {trains}\n"
        f"launch.main([{str(tmp_path)!r}])\n"
    )
    done = rank_1_of_2(script)
    ours = [line for line in done.stderr.splitlines() if line.startswith("pipeplan: ")]
    assert (done.returncode, ours) == (code, said), done.stderr[-3000:]


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (Linux: SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


@pytest.mark.multiprocess
@pytest.mark.long  # a signalled rank named: the SIGKILL case above, in the default run
@pytest.mark.timeout(200)
@pytest.mark.parametrize("moment", ["once it catches SIGTERM", "as soon as it exists"])
def test_a_rank_sent_sigterm_as_it_starts_is_the_rank_named(tmp_path, moment):
    """Found by the seventeenth round: SIGTERM to rank 1 as it started said "runs/k/run.jsonl:
    no such file"; then (both ranks dead of SIGTERM, the second by the agent) it named rank 0.
    A rank stopped as it starts reports it, with its time. Found again by the twenty-fifth
    round, as soon as rank 1 exists (its shell, or the interpreter's own start: dead of
    SIGTERM with no report): rank 0, which reported the agent's SIGTERM, was named; the
    agent's own stops now tell it (`faults.AgentStops`)."""
    run = start_run(tmp_path)
    deadline = time.monotonic() + 60
    while (rank1 := rank_processes(tmp_path / "k").get(1)) is None:
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.01)
    # Once its first statements catch SIGTERM (`executor.launch`), it reports its stop. A
    # fixed 0.3 s was too short on a loaded machine (load 10 on 2 cores: rank 0 named).
    while moment.startswith("once") and not catches(rank1, signal.SIGTERM):
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.01)
    os.kill(rank1, signal.SIGTERM)
    pattern = r"pipeplan: error: training failed on rank 1 before the first step: stopped by "
    one_line(run, 2, pattern + "SIGTERM" + LOGS + NO_CHECKPOINT)
    assert no_rank_left(tmp_path)


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_stopped_rank_ends_the_run_after_the_collective_timeout(tmp_path):
    run, rank1 = paused_run(tmp_path, "--collective-timeout", "5")
    stopped = time.monotonic()
    os.kill(rank1, signal.SIGSTOP)
    try:
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1" + AT + r": no response within the "
            r"collective timeout of 5 s \(stopped or hung\)" + LOGS + NO_CHECKPOINT,
        )
    finally:
        if run.poll() is None:
            os.kill(rank1, signal.SIGKILL)
    # the timeout and a margin: the launcher wakes (SIGCONT) the stopped rank it stops, which
    # then dies of the SIGTERM at once (torch's 30 s grace before its SIGKILL was waited)
    assert time.monotonic() - stopped < 5 + 20
    assert no_rank_left(tmp_path)


# In `-m long` for the suite's time (24 s): the stopped-rank tests beside it cover the wait.
@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_rank_stopped_while_rank_0_writes_a_checkpoint_ends_the_run(tmp_path):
    """Found by the thirty-fourth round: rank 1 stopped (SIGSTOP) while rank 0 wrote a
    checkpoint hung the run for 24 h, silent: rank 0 waited for it in the barrier after the
    write, under the one-sided work's timeout. Rank 0, whose work it was, now waits for the
    others there at most the collective timeout: the run ends naming rank 1, no response
    within it, and keeps the checkpoint written."""
    paused = tmp_path / "paused"
    args = ["--collective-timeout", "5", "--checkpoint-every", "3", "--max-steps-per-epoch", "9"]
    run = start_run(tmp_path, *args, **fault("stop_in_checkpoint", paused))
    rank1 = None
    try:
        wait_for(paused, run)
        stopped = time.monotonic()
        rank1 = rank_processes(tmp_path / "k")[1]
        # In the checkpoint after step 2 (the barrier after its write), or at step 3: the
        # records cannot tell them apart (the thirty-fifth round: it said "at step 3").
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1 after step 2, writing its checkpoint, "
            r"or at step 3: no response within the collective timeout of 5 s \(stopped or "
            r"hung\)" + LOGS + r"; resume with: .*",
        )
        # the timeout and a margin: no more torch's 30 s grace before it kills a rank that
        # could not act on its SIGTERM (stopped): the launcher wakes the ranks it stops
        assert time.monotonic() - stopped < 5 + 15
        assert (tmp_path / "k" / "checkpoints" / "latest").read_text() == "step-3\n"
    finally:
        if rank1 is not None and run.poll() is None:
            os.kill(rank1, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
    assert no_rank_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "stop, args, where",
    [
        pytest.param(  # `-m long` for the suite's time: the one-sided unit tests below
            "stop_at_a_one_sided_wait", [], " before the first step", marks=pytest.mark.long
        ),
        # the same 24 h group's gather; the mechanism (a gloo timeout) is the run's as above
        pytest.param(
            "stop_before_checkpoint_gather",
            ["--checkpoint-every", "3", "--max-steps-per-epoch", "9"],
            " after step 2, writing its checkpoint, or at step 3",  # the thirty-fifth round's
            marks=pytest.mark.long,
        ),
        # the wait for a chunk of held-out reads (the thirty-seventh round's): the same barrier,
        # its stop in the data's own reads
        pytest.param(
            "tests.killer_data:digits_stop_in_eval_read",
            ["--max-steps-per-epoch", "2", "--global-batch", "8"],
            " after step 1, at the end of epoch 1",
            marks=pytest.mark.long,
        ),
    ],
)
def test_a_rank_stopped_while_the_others_wait_for_one_sided_work_ends_the_run(
    tmp_path, stop, args, where
):
    """Found by the thirty-fourth round: a rank stopped (SIGSTOP) or hung while the others
    waited for one-sided work (a checkpoint's write, the cache's fill, evaluation, rank 0's
    planning) hung the run for 24 h, silent: the wait was a gloo barrier under a 24 h timeout,
    as the work can be long; so did one stopped as a checkpoint's gather to rank 0 began (on
    the same group). Every rank now beats a heartbeat into the run's store while it works,
    and the wait fails once a rank not there has been silent for the collective timeout; the
    gathers' group has the collective timeout. The run ends naming the stopped rank (not the
    rank that waited), no rank left."""
    paused = tmp_path / "paused"
    data = ["--data", stop] if ":" in stop else []  # else a fault of tests/faultsite's
    env = {"PIPEPLAN_TEST_PAUSED": str(paused)} if data else fault(stop, paused)
    run = start_run(tmp_path, *data, *args, "--collective-timeout", "10", **env)
    rank1 = None
    try:
        wait_for(paused, run)
        stopped = time.monotonic()
        rank1 = rank_processes(tmp_path / "k")[1]
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1" + where + ": no response within the "
            r"collective timeout of 10 s \(stopped or hung\)" + LOGS + NO_CHECKPOINT,
            timeout=90,
        )
        # the timeout, a heartbeat's look, a margin (no more torch's 30 s grace before it
        # kills a stopped rank: the launcher wakes the ranks it stops)
        assert time.monotonic() - stopped < 10 + 2 + 15
    finally:
        if rank1 is not None and run.poll() is None:
            os.kill(rank1, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
    assert no_rank_left(tmp_path)
    if stop.endswith("wait"):  # rank 0's own line names the silent rank too
        log = (tmp_path / "k" / "logs" / "rank-0.log").read_text()
        assert "no response from rank 1 within the collective timeout of 10 s" in log


# A `sitecustomize` module on the ranks' path: rank 1 of `pipeplan run` stops itself
# (SIGSTOP) as its interpreter starts, before anything of the rank's own (its heartbeat comes
# after the ranks have met), touching PIPEPLAN_TEST_PAUSED first. The launcher imports it too
# (no RANK there: nothing).
STOP_AS_IT_STARTS = """import os, signal
if os.environ.get("RANK") == "1" and os.environ.get("PIPEPLAN_LAUNCHER_PID"):
    open(os.environ["PIPEPLAN_TEST_PAUSED"], "a").close()
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def run_files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run but its logs, by path: what a failed start must leave as it was."""
    return {
        str(path.relative_to(run_dir)): path.read_bytes()
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and "logs" not in path.relative_to(run_dir).parts
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize("resume", [False, pytest.param(True, marks=pytest.mark.long)])
def test_a_rank_stopped_as_it_starts_ends_the_run_after_the_collective_timeout(
    tmp_path, request, resume
):
    """Found by the thirty-seventh round: under `pipeplan run` a rank stopped (SIGSTOP) as it
    started (importing, meeting the others, a resume's start) was waited for without a limit,
    silent: the others wait for a slow start, and no heartbeat exists before the ranks have
    met (92 s of a fresh run, 194 s of a resume, then cut by `timeout`). The launcher now
    watches its ranks' states: one stopped for the collective timeout (and a grace of 5 s,
    for the ranks' own timeouts once they train) is killed and named as a rank stopped later
    is, "no response within the collective timeout of 3 s (stopped or hung)", exit 2, no
    rank left, the run's files as they were. A start slow but running is still waited for."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STOP_AS_IT_STARTS)
    paused = tmp_path / "paused"
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{hook}", "PIPEPLAN_TEST_PAUSED": str(paused)}
    run_dir = tmp_path / "k"
    if resume:  # a finished 1-rank run, resumed for a second epoch on 2 ranks
        shutil.copytree(request.getfixturevalue("finished_run"), run_dir)
        before = run_files(run_dir)
        command = [*PIPEPLAN, "run", "--resume", str(run_dir), "--nproc", "2", "--epochs", "2"]
        run = subprocess.Popen(
            [*command, "--collective-timeout", "3"],
            cwd=ROOT,
            env=environment(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        where, then = " before the resume's first step", "; resume with: .*"
    else:
        run = start_run(tmp_path, "--collective-timeout", "3", **env)
        where, then = " before the first step", NO_CHECKPOINT
    try:
        wait_for(paused, run)
        stopped = time.monotonic()
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1" + where + r": no response within the "
            r"collective timeout of 3 s \(stopped or hung\)" + LOGS + then,
            timeout=90,
        )
        # the timeout and the grace, the launcher's look (every 0.5 s), a margin
        assert time.monotonic() - stopped < 3 + 5 + 12
    finally:
        if run.poll() is None:  # the old code: rank 1 stopped for good, the launcher waiting
            for pid in rank_processes(run_dir).values():
                os.kill(pid, signal.SIGKILL)
            run.kill()
            run.wait(timeout=30)
    assert rank_processes(run_dir) == {}
    if resume:  # its checkpoint, records and settings as they were
        after = run_files(run_dir)
        assert {name: after.get(name) for name in before} == before
    log = (run_dir / "logs" / "launcher.log").read_text()
    assert "rank 1 (pid " in log and "stopped for more than the collective timeout" in log


@pytest.mark.timeout(60)
def test_the_launcher_kills_a_rank_stopped_the_timeout_and_wakes_those_the_agent_stops(
    monkeypatch,
):
    """With the thirty-seventh round's fix (above), the watch itself (`faults.StoppedRanks`),
    on two children standing for ranks: one stopped without a break for the timeout is killed
    and listed; one stopped for less, then continued, is left alone. A rank the agent stops
    (its "closing signal" log line, `AgentStops`) is woken (SIGCONT) once the agent's signal
    is pending: stopped, it could not act on the agent's SIGTERM, and torch waited 30 s
    before its SIGKILL (each SIGSTOP test took 50 s of the suite)."""
    import logging

    marker = "PIPEPLAN_LAUNCHER_PID"
    env = {**os.environ, marker: str(os.getpid())}
    ranks = [
        subprocess.Popen(["sleep", "60"], env={**env, "RANK": str(rank)}, start_new_session=True)
        for rank in (0, 1)
    ]
    try:
        # (Popen returns once its child has exec'd: its environment is the rank's.)
        monkeypatch.setattr(faults, "STOPPED_GRACE_S", 0.0)  # the watch's timeout alone
        with faults.StoppedRanks(2, 2.0, marker) as watch:
            os.kill(ranks[1].pid, signal.SIGSTOP)
            os.kill(ranks[0].pid, signal.SIGSTOP)
            time.sleep(0.5)
            os.kill(ranks[0].pid, signal.SIGCONT)  # stopped for less than the timeout
            assert ranks[1].wait(timeout=10) == -signal.SIGKILL
            assert watch.ended == {1} and watch.pids == {0: ranks[0].pid, 1: ranks[1].pid}
            assert ranks[0].poll() is None
            os.kill(ranks[0].pid, signal.SIGSTOP)
            deadline = time.monotonic() + 5
            while process_state(ranks[0].pid) != "T":
                assert time.monotonic() < deadline
                time.sleep(0.01)
            with faults.AgentStops(watch.wake) as stops:  # as the agent says it, then acts
                logging.getLogger(faults.AGENT_LOGGER).warning(
                    faults.AGENT_STOPS, ranks[0].pid, "SIGTERM"
                )
                # Not woken before the agent's signal is sent: it would run on, find its peers
                # gone, and report that (it was named instead of the stopped rank).
                time.sleep(0.3)
                assert process_state(ranks[0].pid) == "T"
                os.killpg(ranks[0].pid, signal.SIGTERM)
            assert stops.pids == {ranks[0].pid}
            assert ranks[0].wait(timeout=5) == -signal.SIGTERM  # woken: dead of it at once
            assert watch.ended == {1}
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait(timeout=10)


# A debugger's hold on a process (gdb -p PID): PTRACE_ATTACH, which stops it (state t), a
# wait for that stop, and then nothing, for an hour: it never resumes it, nor reaps it once
# it is killed. Prints "attached" once it is stopped, or "refused: …" and exits 3.
TRACER = """import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
libc.ptrace.restype = ctypes.c_long
pid = int(sys.argv[1])
if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
    print("refused:", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(3)
os.waitpid(pid, 0x40000000)  # __WALL: its stop
print("attached", flush=True)
time.sleep(3600)
"""


def attach_tracer(pid: int) -> subprocess.Popen:
    """A debugger's hold (TRACER) on process `pid`, once it has taken it; pytest.skip, with
    the reason, where this machine does not let a process trace another (Yama's
    ptrace_scope, a container's seccomp)."""
    tracer = subprocess.Popen(
        [sys.executable, "-c", TRACER, str(pid)], stdout=subprocess.PIPE, text=True
    )
    said = tracer.stdout.readline().strip()
    if said == "attached":
        return tracer
    tracer.wait(timeout=10)
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        scope = "absent"
    pytest.skip(f"ptrace refused here ({said or 'no answer'}; yama ptrace_scope: {scope})")


def end_tracer(tracer: subprocess.Popen) -> None:
    """The debugger lets go (it dies): a zombie it held goes back to its parent, or init."""
    tracer.kill()
    tracer.wait(timeout=10)


@pytest.mark.timeout(60)
def test_the_launcher_lets_go_of_a_rank_a_tracer_holds_dead(monkeypatch):
    """Found by the thirty-eighth round: a rank held by a debugger (gdb -p: ptrace) was killed
    on time, the collective timeout after it stopped, but a killed process that is traced
    stays a zombie only its tracer can reap, and the agent waited for it until the debugger
    let go: `pipeplan run` never ended. The watch (`faults.StoppedRanks`) now lets go of a rank
    dead and unreaped for REAP_S: its Popen says the code it died of (the agent's `poll()`
    and timed `wait()` return), and `held` and `unreaped()` name it with its tracer. A rank a
    tracer holds stopped that the agent stops is killed, not woken: SIGCONT cannot resume
    it, and the agent waited 30 s before its own SIGKILL. Two `sleep` children stand for the
    ranks, as in the test above."""
    import logging

    marker = "PIPEPLAN_LAUNCHER_PID"
    env = {**os.environ, marker: str(os.getpid())}
    ranks = [
        subprocess.Popen(["sleep", "60"], env={**env, "RANK": str(rank)}, start_new_session=True)
        for rank in (0, 1)
    ]
    tracers = []
    try:
        monkeypatch.setattr(faults, "STOPPED_GRACE_S", 0.0)
        monkeypatch.setattr(faults, "REAP_S", 0.5)
        with faults.StoppedRanks(2, 1.0, marker) as watch:
            tracers.append(attach_tracer(ranks[1].pid))
            started = time.monotonic()
            # rank 1: stopped by its tracer for the timeout, killed, then let go unreaped
            assert ranks[1].wait(timeout=10) == -signal.SIGKILL
            assert time.monotonic() - started < 1.0 + 0.5 + 3  # the timeout, REAP_S, looks
            assert process_state(ranks[1].pid) == "Z"  # the tracer's to reap
            assert watch.ended == {1} and watch.held == {1: (ranks[1].pid, tracers[0].pid)}
            # rank 0: stopped by its tracer as the agent stops it (well within the timeout)
            tracers.insert(0, attach_tracer(ranks[0].pid))
            with faults.AgentStops(watch.wake):
                logging.getLogger(faults.AGENT_LOGGER).warning(
                    faults.AGENT_STOPS, ranks[0].pid, "SIGTERM"
                )
                os.killpg(ranks[0].pid, signal.SIGTERM)
            assert ranks[0].wait(timeout=10) == -signal.SIGKILL
            assert watch.ended == {1} and set(watch.held) == {0, 1}
        assert watch.unreaped() == "".join(
            f"; rank {rank} (pid {ranks[rank].pid}) is held by a tracer "
            f"(pid {tracers[rank].pid}) and could not be reaped"
            for rank in (0, 1)
        )
    finally:
        for tracer in tracers:
            end_tracer(tracer)
        for rank in ranks:
            rank.kill()


# A `sitecustomize` module on the ranks' path: rank 1 of `pipeplan run` writes its pid into
# PIPEPLAN_TEST_PAUSED as its interpreter starts, then sleeps there (for a debugger to take).
SLEEP_AS_IT_STARTS = """import os, time
if os.environ.get("RANK") == "1" and os.environ.get("PIPEPLAN_LAUNCHER_PID"):
    with open(os.environ["PIPEPLAN_TEST_PAUSED"] + ".tmp", "w") as pid:
        pid.write(str(os.getpid()))
    os.rename(os.environ["PIPEPLAN_TEST_PAUSED"] + ".tmp", os.environ["PIPEPLAN_TEST_PAUSED"])
    time.sleep(3600)
"""


@pytest.mark.multiprocess
@pytest.mark.long  # a run's start; the watch's own test above, in the default run
@pytest.mark.timeout(200)
def test_a_run_whose_rank_a_debugger_holds_ends_and_names_it(tmp_path):
    """Found by the thirty-eighth round: `gdb -p` on a rank of `pipeplan run` (here its
    ptrace attach alone, from a helper process) stopped it; the launcher killed it on time
    (the collective timeout of 3 s and its grace of 5 s), but the agent then waited for the
    traced zombie until the debugger let go: the run never ended (cut by `timeout` at 60 s).
    It now ends within REAP_S of the kill, exit 2, in one line that names the rank and the
    tracer that holds it; no rank of ours is left running."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLEEP_AS_IT_STARTS)
    paused = tmp_path / "paused"
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{hook}", "PIPEPLAN_TEST_PAUSED": str(paused)}
    run = start_run(tmp_path, "--collective-timeout", "3", **env)
    tracer = None
    try:
        wait_for(paused, run)
        rank1 = int(paused.read_text())
        tracer = attach_tracer(rank1)
        held = time.monotonic()
        one_line(
            run,
            2,
            r"pipeplan: error: training failed on rank 1 before the first step: no response "
            r"within the collective timeout of 3 s \(stopped or hung\); "
            rf"rank 1 \(pid {rank1}\) is held by a tracer \(pid {tracer.pid}\) and could not "
            r"be reaped" + LOGS + NO_CHECKPOINT,
            timeout=60,
        )
        # the timeout and the grace, REAP_S, the launcher's looks (every 0.5 s), a margin
        assert time.monotonic() - held < 3 + 5 + 3 + 12
        assert no_rank_left(tmp_path)  # rank 1 a zombie: not a process that runs
    finally:
        if run.poll() is None:  # the old code: the launcher waiting for the tracer
            run.kill()
            run.wait(timeout=30)
        if tracer is not None:
            end_tracer(tracer)
        for pid in rank_processes(tmp_path / "k").values():
            os.kill(pid, signal.SIGKILL)


def one_sided_ranks(world: int, timeout_s: float) -> tuple:
    """(the store, `world` ranks' OneSidedWaits on it): a local store, threads for ranks. The
    store returned is its server: kept by the caller, or the ranks lose it."""
    import datetime

    import torch.distributed as dist

    from executor.worker import OneSidedWaits

    store = dist.TCPStore(
        "127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False
    )
    return store, *(OneSidedWaits.start(store, timeout_s, rank, world) for rank in range(world))


def waited(waits, by_rank0: bool = False) -> tuple[threading.Thread, list, float]:
    """`waits.wait(by_rank0)` in a thread of its own: (the thread, [what it raised, once
    done: None if nothing], when it started)."""
    outcome: list = [None]
    started = time.monotonic()

    def wait() -> None:
        try:
            waits.wait(by_rank0)
        except BaseException as exc:
            outcome[0] = exc

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, outcome, started


@pytest.mark.timeout(60)
def test_a_one_sided_wait_waits_for_a_late_rank_that_beats_and_names_a_silent_one():
    """Found by the thirty-fourth round (as above), the wait itself: a late rank whose
    heartbeat goes on is waited for beyond the collective timeout (its work can be long); one
    that fell silent (stopped) is named once it has been silent for the timeout; rank 0
    waiting after its own work (`by_rank0`) names a missing rank after the timeout, beating or
    not. Consecutive waits do not mix."""
    from executor.faults import PeerSilent, classify

    _store, rank0, rank1 = one_sided_ranks(2, timeout_s=1.5)
    thread, outcome, started = waited(rank0)
    time.sleep(4)  # well beyond the timeout, rank 1 beating
    assert thread.is_alive()
    rank1.wait()
    thread.join(5)
    assert not thread.is_alive() and outcome[0] is None
    assert time.monotonic() - started >= 4

    thread, outcome, started = waited(rank0, by_rank0=True)  # rank 1, beating, never comes
    thread.join(10)
    assert isinstance(outcome[0], PeerSilent) and classify(outcome[0]) == "timeout"
    assert "no response from rank 1 within the collective timeout of 1.5 s" in str(outcome[0])
    assert time.monotonic() - started < 1.5 + 2 + 1

    rank1.wait(by_rank0=True)  # the second wait, late: rank 1 catches up
    rank1.close()  # silent from now on, as a stopped rank is
    thread, outcome, started = waited(rank0)
    thread.join(10)
    assert isinstance(outcome[0], PeerSilent), outcome[0]
    assert "no response from rank 1 within the collective timeout of 1.5 s" in str(outcome[0])
    assert "(stopped or hung: no heartbeat) while rank 0 waited" in str(outcome[0])
    assert 1.5 <= time.monotonic() - started < 1.5 + 2 + 1
    rank0.close()


@pytest.mark.timeout(60)
def test_only_the_first_and_last_rank_read_the_heartbeats():
    """Every waiting rank read every rank's heartbeat each second: world² reads a second of
    the run's one store (16 million at 4,096 ranks). The first and the last rank watch; the
    others only look for the end of the wait. A silent rank is still named, by a watcher."""
    from executor.faults import PeerSilent

    _store, *ranks = one_sided_ranks(4, timeout_s=1.0)
    reads = {rank: 0 for rank in range(4)}

    class Counted:  # the rank's store, its heartbeat reads counted
        def __init__(self, store, rank):
            self.store, self.rank = store, rank

        def multi_get(self, keys):
            reads[self.rank] += 1
            return self.store.multi_get(keys)

        def __getattr__(self, name):
            return getattr(self.store, name)

    for rank, waits in enumerate(ranks):
        waits.store = Counted(waits.store, rank)
    ranks[2].close()  # silent from now on, as a stopped rank is
    threads = [waited(ranks[r]) for r in (0, 1, 3)]
    for thread, _, _ in (threads[0], threads[2]):  # the watchers end, after the timeout
        thread.join(10)
    assert isinstance(threads[0][1][0], PeerSilent) and isinstance(threads[2][1][0], PeerSilent)
    assert "no response from rank 2" in str(threads[0][1][0])
    # Rank 1 waits on, past the timeout that ended the watchers (it waited as long): the agent
    # stops it as rank 0 fails. (A join of 10 s more proved nothing more, for 10 s of the suite.)
    assert threads[1][0].is_alive() and threads[1][1][0] is None
    assert reads[0] > 0 and reads[3] > 0 and reads[1] == 0
    for waits in ranks:
        waits.close()


@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_long_one_sided_work_does_not_trip_the_collective_timeout(tmp_path):
    data = "tests.killer_data:digits_slow_one_sided"
    args = ["--data", data, "--collective-timeout", "3", "--max-steps-per-epoch", "2"]
    run = start_run(tmp_path, *args)
    _, err = run.communicate(timeout=150)
    assert run.returncode == 0, err


# In `-m long` for the suite's time (29 s): tests/test_trainer.py's chunked-read test covers
# the order of reads and waits.
@pytest.mark.long
@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_a_slow_held_out_read_inside_evaluation_does_not_trip_the_collective_timeout(tmp_path):
    """Found by the thirty-seventh round: `run --help` says one-sided work, evaluation among
    it, is waited for apart, but a 13 s `__getitem__` of the held-out data on stage 0 inside
    the epoch's evaluation, under `--collective-timeout 5`, ended a healthy 2x1 run: "training
    failed on rank 0 after step 2, at the end of epoch 1: no response within the collective
    timeout of 5 s (stopped or hung)" (stage 1's receive of the activations timed out while
    stage 0 read). (The slow read of `digits_slow_one_sided` is the rank's first under
    no_grad, in its start-up checks.) Each rank now reads the held-out batches a chunk ahead,
    all wait for those reads as for other one-sided work (as long as the reader beats), and
    only then run the chunk's forward passes: the run ends with rc 0, its epoch evaluated."""
    args = ["--data", "tests.killer_data:digits_slow_eval_read", "--collective-timeout", "3"]
    run = start_run(tmp_path, *args, "--max-steps-per-epoch", "2", "--global-batch", "8")
    _, err = run.communicate(timeout=150)
    assert run.returncode == 0, err
    records = read_records(tmp_path / "k" / "run.jsonl")
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    # A pipeline: stage 1 waits for stage 0's activations (two replicas would not).
    assert [(p.layout.num_stages, p.layout.replicas) for p in phases] == [(2, 1)]
    (epoch,) = [r for r in records if isinstance(r, EpochRecord)]
    assert epoch.eval_loss is not None and epoch.eval_accuracy is not None
    assert epoch.eval_s > 8  # the slow read was waited for, inside the evaluation


@pytest.mark.multiprocess
@pytest.mark.long  # the cached-phase stop below asserts the same line of a launcher stopped
@pytest.mark.timeout(200)
@pytest.mark.parametrize("signum", [signal.SIGTERM])  # SIGHUP: the single-process test
def test_sigterm_to_the_launcher_is_one_line_and_leaves_no_process(tmp_path, signum):
    """Found by the fifteenth round: SIGTERM to `run` said "pipeplan: error: training stopped
    by SIGTERM" with a user error's exit code 2, while `profile` died of it silently (143).
    Every command now says `pipeplan: stopped by SIGTERM` and exits 128 + the signal."""
    run, _ = paused_run(tmp_path)
    run.send_signal(signum)
    one_line(run, 128 + signum, f"pipeplan: stopped by {signal.Signals(signum).name}")
    assert no_rank_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
# In `-m long`, for the suite's time: the default run keeps
# test_every_stop_signal_to_the_launcher_mid_run_is_one_line_and_leaves_no_rank.
@pytest.mark.long
def test_sigusr1_to_the_launcher_mid_run_is_one_line_and_leaves_no_rank(tmp_path):
    """Found by the thirty-fourth round: SIGUSR1 to `pipeplan run` as its ranks trained (Slurm's
    `--signal=USR1@60` before a job's time limit, or `kill -USR1`) killed the launcher at once
    with no line (exit 138 said by the shell alone): torch's agent took only SIGTERM, SIGINT,
    SIGHUP and SIGQUIT. It now takes every stop signal (SIGUSR1, SIGUSR2, SIGALRM too) as
    SIGTERM: sent on to the ranks, every rank waited for, then `pipeplan: stopped by SIGUSR1`
    and exit 138, no rank process left."""
    run, _ = paused_run(tmp_path)
    ranks = rank_processes(tmp_path / "k")
    assert sorted(ranks) == [0, 1]
    run.send_signal(signal.SIGUSR1)
    one_line(run, 128 + signal.SIGUSR1, "pipeplan: stopped by SIGUSR1")
    assert no_rank_left(tmp_path)
    # Gone, not merely renamed: each rank process has exited (at most a zombie left to init).
    assert [pid for pid in ranks.values() if process_state(pid) not in (None, "Z")] == []


# One stop signal of each kind the thirty-fifth round found killing `pipeplan run` in
# silence: a CPU limit's, the timers' two, and real-time ones (torch's agent takes SIGRTMIN and
# SIGRTMAX by name; SIGRTMIN+1 has none in Python's signal module: `launch.agent_stop`'s).
# SIGXCPU and SIGRTMIN+1, one of each path, by default; the others' in `-m long`, for the
# suite's 15 minutes (the command's own handlers take each of them: tests/test_cli.py).
NEW_STOPS = [
    # Long too, for the 15 minutes: SIGUSR1 to the launcher mid-run, just above, takes the
    # same path (taken as SIGTERM, sent on, every rank waited for); test_cli holds SIGXCPU's.
    pytest.param(signal.SIGXCPU, "SIGXCPU", marks=pytest.mark.long),
    pytest.param(signal.SIGVTALRM, "SIGVTALRM", marks=pytest.mark.long),
    pytest.param(signal.SIGPROF, "SIGPROF", marks=pytest.mark.long),
    pytest.param(signal.SIGRTMIN, "SIGRTMIN", marks=pytest.mark.long),
    pytest.param(signal.SIGRTMIN + 1, "SIGRTMIN+1", marks=pytest.mark.long),
    pytest.param(signal.SIGRTMAX, "SIGRTMAX", marks=pytest.mark.long),
]


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("signum", "name"), NEW_STOPS)
def test_every_stop_signal_to_the_launcher_mid_run_is_one_line_and_leaves_no_rank(
    tmp_path, signum, name
):
    """Found by the thirty-fifth round: SIGXCPU (a `ulimit -t` CPU limit), SIGVTALRM, SIGPROF
    and the real-time signals SIGRTMIN..SIGRTMAX (some schedulers send them) to `pipeplan run`
    as its ranks trained killed it at once with no line, its ranks left to their parent-death
    signal: `startup.STOP_SIGNALS` held six signals by hand. It is now every signal whose
    default ends a process but Ctrl-C's, the faults and those Python ignores; each is taken as
    SIGTERM: sent on to the ranks, every rank waited for, then `pipeplan: stopped by
    SIGRTMIN+1` (as `kill -l` names it) and exit 128 + the signal, no rank process left."""
    run, _ = paused_run(tmp_path)
    ranks = rank_processes(tmp_path / "k")
    assert sorted(ranks) == [0, 1]
    run.send_signal(signum)
    one_line(run, 128 + signum, re.escape(f"pipeplan: stopped by {name}"))
    assert no_rank_left(tmp_path)
    assert [pid for pid in ranks.values() if process_state(pid) not in (None, "Z")] == []


def rank_caches(pids: list[int], shm: Path = Path("/dev/shm")) -> list[Path]:
    """The AutoCache folders processes `pids` made in /dev/shm (`pipeplan-NS-PID-START-TOKEN`)."""
    named = [p.name.split("-") for p in shm.glob("pipeplan-*")]
    return [
        shm / "-".join(n) for n in named if len(n) == 5 and n[2].isdigit() and int(n[2]) in pids
    ]


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "whom, signum",
    [
        ("launcher", signal.SIGTERM),
        # The same `finally` as SIGTERM's: long, to keep the default run under 15 minutes.
        pytest.param("launcher", signal.SIGINT, marks=pytest.mark.long),
        pytest.param("rank 0", signal.SIGTERM, marks=pytest.mark.long),  # the maker, at once
    ],
)
def test_a_run_stopped_in_a_cached_phase_leaves_no_cache(tmp_path, whom, signum):
    """Found by the eighteenth round: SIGTERM or Ctrl-C during a cached phase left rank 0's
    AutoCache folder in /dev/shm (`pipeplan-NS-PID-START-TOKEN`, rows and map) until the next
    run; a normal end removes it. The ranks die of the stop without cleaning up (SIGTERM
    kills one at once), so the launcher removes their caches once every rank is gone: the
    folders in /dev/shm and `cache/` under the run directory, as a normal end does."""
    paused = tmp_path / "paused"
    run = start_run(
        tmp_path,
        *("--data", "tests.killer_data:digits_pause_once"),
        epochs=2,  # a cache that can hit: the plan caches the phase
        freeze="4",  # 4 layers frozen from the start: the first epoch fills the cache
        PIPEPLAN_TEST_PAUSE_AFTER="100",
        PIPEPLAN_TEST_PAUSE_RANK="1",
        PIPEPLAN_TEST_PAUSED=str(paused),
    )
    wait_for(paused, run)
    ranks = rank_processes(tmp_path / "k")
    folders = [*rank_caches(list(ranks.values())), tmp_path / "k" / "cache"]
    assert [f for folder in folders for f in folder.glob("node0-v4.rows")]  # a cached phase
    os.kill(run.pid if whom == "launcher" else ranks[0], signum)
    # stopped (128 + 15), interrupted (130), or a failed rank (2): said as before, in one line
    if whom == "launcher":
        said = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
        one_line(run, 128 + signum, f"pipeplan: {said}")
    else:
        assert run.wait(timeout=120) == 2
    assert no_rank_left(tmp_path)
    assert rank_caches(list(ranks.values())) == []
    assert not (tmp_path / "k" / "cache").exists()


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "whom, signum",
    [
        # Both long, for the default run's 15 minutes: the rank's own clean-up is
        # tests/test_checkpoint.py's SIGTERM and SIGHUP inside `save`, in one process.
        pytest.param("launcher", signal.SIGTERM, marks=pytest.mark.long),
        # The launcher's, for a rank killed outright.
        pytest.param("rank 0", signal.SIGKILL, marks=pytest.mark.long),
    ],
)
def test_a_run_stopped_during_a_checkpoint_write_leaves_no_partial_folder(tmp_path, whom, signum):
    """Found by the twenty-fifth round: SIGTERM or SIGHUP to `pipeplan run` (or SIGTERM or
    SIGKILL to rank 0 alone) while rank 0 wrote a checkpoint left `checkpoints/.tmp-step-N/`
    (model.pt and optimizer.pt: GBs for a real model) until a later resume; Ctrl-C removed
    it. Rank 0 now takes SIGTERM and SIGHUP in the write as Ctrl-C, and removes the folder;
    the launcher removes what a rank killed outright left, once every rank is gone."""
    paused = tmp_path / "paused"
    run = start_run(
        tmp_path,
        *("--max-steps-per-epoch", "4", "--checkpoint-every", "2"),
        **fault("pause_in_checkpoint", paused),
    )
    wait_for(paused, run)
    checkpoints = tmp_path / "k" / "checkpoints"
    assert (checkpoints / ".tmp-step-2" / "model.pt").is_file()  # paused inside the write
    os.kill(run.pid if whom == "launcher" else rank_processes(tmp_path / "k")[0], signum)
    if whom == "launcher":
        one_line(run, 128 + signum, "pipeplan: stopped by SIGTERM")
    else:
        one_line(run, 2, r"pipeplan: error: training failed on rank 0.*killed by SIGKILL.*")
    assert no_rank_left(tmp_path)
    assert sorted(p.name for p in checkpoints.iterdir()) == []
    if whom == "launcher":  # rank 0 removed it itself (under torchrun no launcher would)
        log = (tmp_path / "k/logs/rank-0.log").read_text()
        assert "pipeplan: rank 0: stopped by SIGTERM" in log


def process_state(pid: int) -> str | None:
    """A process's state letter (R, S, T, Z, …), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def importing_torch(pid: int) -> bool:
    """Whether process `pid` has torch's library mapped: past a rank's first statements, in
    the imports that take seconds."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_rank_stopped_while_it_imports_dies_with_its_killed_launcher(tmp_path):
    """Found by the seventeenth round: a rank stopped (SIGSTOP) while it started, then
    SIGKILL of `pipeplan run`, left the rank reparented to init in state T for ever: its
    parent-death signal (SIGKILL, which a stopped process gets) was asked for only after its
    imports, seconds in. It is now the first thing the rank does. The launcher here is a bare
    process starting `python -m executor.launch` as torch's agent does (a session of its
    own); the rank is stopped inside `import torch`."""
    code = (
        "import subprocess, sys, time\n"
        "argv = [sys.executable, '-m', 'executor.launch', 'runs/none']\n"
        "rank = subprocess.Popen(argv, start_new_session=True)\n"
        "print(rank.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=environment(), stdout=subprocess.PIPE
    )
    rank = int(launcher.stdout.readline())
    try:
        deadline = time.monotonic() + 60
        while not importing_torch(rank) and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(rank, signal.SIGSTOP)
        stopped_by = time.monotonic() + 5  # the signal is delivered, not awaited
        while process_state(rank) != "T" and time.monotonic() < stopped_by:
            time.sleep(0.01)
        assert process_state(rank) == "T", "the rank was not stopped while importing"
        launcher.kill()
        launcher.wait(timeout=30)
        gone_by = time.monotonic() + 10
        while process_state(rank) not in (None, "Z") and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert process_state(rank) in (None, "Z")  # killed (a zombie until init reaps it)
    finally:
        if process_state(rank) not in (None, "Z"):  # not left to the rest of the suite
            os.kill(rank, signal.SIGKILL)
        launcher.kill()
        launcher.wait(timeout=30)


# SIGHUP takes SIGTERM's handler with another number: in `-m long`, for the suite's time.
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.long)]
)
def test_sigterm_to_a_single_process_command_is_one_line(tmp_path, signum):
    """The same for a command without ranks (a profile of 1000 repeats takes minutes): one
    line, 128 + the signal, and no profile written."""
    out = tmp_path / "p.json"
    argv = [*PIPEPLAN, "profile", "vit-digits", "--repeats", "1000", "--out", str(out)]
    profile = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # importing torch, building the model: inside the work
    profile.send_signal(signum)
    one_line(profile, 128 + signum, f"pipeplan: stopped by {signal.Signals(signum).name}")
    assert not out.exists()


# A command whose first check collects an object that is stopped inside its __del__: the
# handler's exception is dropped there by Python, and the command then sleeps a minute.
_STOPPED_IN_A_DEL = """
import os, signal, sys, time
import cli

class Collected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIG{name})
        for _ in range(10**6):  # the handler runs here, inside __del__
            pass

def check(given):
    Collected()
    time.sleep(60)

cli._check_repeats = check
sys.exit(cli.main(["plan", "--help"]))
"""


@pytest.mark.parametrize("name", ["INT", "TERM", "HUP"])
def test_a_signal_that_lands_in_a_del_still_stops_the_command(name):
    """Python drops an exception raised in a __del__ ("Exception ignored in ..."): a SIGHUP
    handled there once left a 1000-repeat profile running for minutes, with a traceback. The
    signal is delivered again: the command stops at once, with its one line."""
    signum = getattr(signal, f"SIG{name}")
    code, line = (
        (130, "pipeplan: interrupted")
        if name == "INT"
        else (128 + signum, f"pipeplan: stopped by SIG{name}")
    )
    start = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_IN_A_DEL.format(name=name)],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    one_line(run, code, line, timeout=50)
    assert time.monotonic() - start < 50  # not the minute's sleep


# A torchrun rank whose training collects an object that is stopped inside its __del__: the
# handler's exception is dropped there by Python, and the training then goes on 30 s.
_RANK_STOPPED_IN_A_DEL = """
import os, signal, time
from executor import launch

class Collected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIG{name})
        for _ in range(10**6):  # the handler runs here, inside __del__
            pass

def train(run_dir, resume, console):
    Collected()
    time.sleep(30)

launch.train_rank = train
launch.main([{run!r}])
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "name, code, said",
    [
        ("INT", 130, "pipeplan: rank 1: interrupted"),
        ("USR1", 138, "pipeplan: rank 1: stopped by SIGUSR1"),
    ],
)
def test_a_signal_that_lands_in_a_del_still_stops_a_rank(tmp_path, name, code, said):
    """Found by the sixty-second round: a Ctrl-C to a rank (`faults.on_sigint`), or under
    torchrun a stop it reports (SIGUSR1, …), that landed as Python ran a finalizer (a data
    set's `__del__`) was dropped there, its traceback printed, and the rank trained on to
    exit 0. It is delivered again, as the command line's: the rank ends with its line and
    the signal's exit code, at once. The rank as torchrun runs it, its training replaced."""
    start = time.monotonic()
    done = rank_1_of_2(_RANK_STOPPED_IN_A_DEL.format(name=name, run=str(tmp_path)))
    ours = [line for line in done.stderr.splitlines() if line.startswith("pipeplan: ")]
    assert (done.returncode, ours) == (code, [said]), done.stderr[-3000:]
    assert time.monotonic() - start < 30  # not the training's half minute
    assert "Exception ignored" not in done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["INT", "TERM"])
def test_a_signal_that_lands_inside_an_import_stops_the_command_after_it(
    tmp_path, monkeypatch, name
):
    """Found by the twenty-fifth round: Ctrl-C while `pipeplan run` imported torch, numpy or
    a transformers model class (about 1 start in 8) raised inside the import; a library's
    guarded import swallowed it and the command went on with a half-imported module (numpy's
    traceback, exit 1) or called it "cannot build the model" (exit 2). Now the signal is held
    until the import is done, then stops the command as anywhere else. Here a module imports
    a slow one under a guard, as such libraries do; the signal lands in the slow one."""
    import cli

    (tmp_path / f"slow_inner_{name}.py").write_text(
        f"import os, signal, time\nos.kill(os.getpid(), signal.SIG{name})\n"
        "time.sleep(0.3)  # the handler runs here, mid-import\nDONE = True\n"
    )
    (tmp_path / f"guarded_outer_{name}.py").write_text(
        f"try:\n    import slow_inner_{name} as inner\nexcept BaseException:  # a library's guard\n"
        "    inner = None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    signum = getattr(signal, f"SIG{name}")
    previous = cli._install({signum: cli._stop})
    try:
        with pytest.raises(Interrupted if name == "INT" else Stopped):
            importlib.import_module(f"guarded_outer_{name}")
            time.sleep(30)  # the held signal lands here, once the import is done
    finally:
        cli._install(previous)
    assert sys.modules[f"guarded_outer_{name}"].inner.DONE  # imported whole, not swallowed


def rank_started(tmp_path: Path, run: subprocess.Popen, timeout: float = 120) -> None:
    """Returns as soon as a rank process of the run exists: its Python is starting."""
    deadline = time.monotonic() + timeout
    while no_rank_left(tmp_path):
        assert run.poll() is None, "the run ended before a rank started"
        assert time.monotonic() < deadline, "no rank started"
        time.sleep(0.01)


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "moment",
    # "1 s later" lies between the two others: long, for the 15-minute default run.
    # "as its rank starts": long too; the profile ranks' start is tested in test_cli.
    [
        pytest.param("as its rank starts", marks=pytest.mark.long),
        pytest.param("1 s later", marks=pytest.mark.long),
        "mid-step",
    ],
)
def test_ctrl_c_prints_interrupted_exits_130_and_leaves_no_process(tmp_path, moment):
    """Thirteenth round: Ctrl-C while a rank started printed its traceback before `pipeplan:
    interrupted` (a KeyboardInterrupt in torch's import, or in Python's own start, in about
    half the runs interrupted as the rank appeared)."""
    if moment == "mid-step":
        run, _ = paused_run(tmp_path)
    else:
        run = start_run(tmp_path, "--max-steps-per-epoch", "2", nproc=1)
        rank_started(tmp_path, run)
        time.sleep(1.0 if moment == "1 s later" else 0)  # "1 s later": importing torch
    run.send_signal(signal.SIGINT)
    one_line(run, 130, "pipeplan: interrupted")
    assert no_rank_left(tmp_path)
    # Twenty-sixth round: a run interrupted before its first step left runs/k, which could
    # neither resume nor be started again; it goes (a run that trained stays, for `report`).
    # As its rank starts, the rank acted on it: one that lost it (it ignores SIGINT until its
    # first statement) trained its 2 steps before the agent killed it, SHUTDOWN_S later.
    assert (tmp_path / "k").exists() == (moment == "mid-step")


# In `-m long`, for the suite's time: the default run keeps
# test_ctrl_c_prints_interrupted_exits_130_and_leaves_no_process.
@pytest.mark.long
def test_a_rank_that_ignored_ctrl_c_stops_at_the_launchers_mark(tmp_path):
    """A rank of `pipeplan run` ignores SIGINT until its first statement (RANK_SHELL), so a
    Ctrl-C then is lost to it; the launcher marks it first (`on_ctrl_c`), and the rank's first
    statement ends it there: exit 130, nothing said, before its imports. Without the mark it
    goes on (here to a refusal of its missing launcher)."""
    mark = tmp_path / "interrupted"
    mark.touch()
    rank = [*RANK_SHELL, "run-mark", sys.executable, "-u", "-m", "executor.launch"]
    rank.append(str(tmp_path / "k"))
    # The mark is honoured from the rank's own launcher only (the forty-seventh round): this
    # process, its parent through RANK_SHELL's exec.
    env = environment(**{INTERRUPTED: str(mark), "PIPEPLAN_LAUNCHER_PID": str(os.getpid())})
    env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(rank, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")
    mark.unlink()
    done = subprocess.run(rank, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "RANK is not set" in done.stderr, done.stderr


# ----------------------------------------------------------------------------- the verdict


class Failure:
    """What the verdict reads of torch's ProcessFailure."""

    def __init__(self, exitcode: int, report: faults.Report | None = None, pid: int = 0):
        self.exitcode = exitcode
        self.pid = pid
        self.error_file_data = {"message": "<NONE>"}
        if report is not None:
            self.error_file_data = json.loads(report.to_json())


def report(rank: int, kind: str, at: float, message: str = "m") -> faults.Report:
    return faults.Report(rank=rank, kind=kind, time=at, message=message)


@pytest.mark.parametrize(
    "failures, expected",
    [
        # the rank that raised first, though another noticed and failed earlier
        (
            {0: Failure(1, report(0, "lost", 1.0)), 1: Failure(1, report(1, "raised", 2.0, "E"))},
            (1, "E"),
        ),
        (
            {
                0: Failure(1, report(0, "raised", 3.0, "A")),
                2: Failure(1, report(2, "raised", 2.0, "B")),
            },
            (2, "B"),
        ),
        # a rank killed without a word, while the agent stopped another with SIGTERM
        (
            {0: Failure(1, report(0, "lost", 1.0)), 1: Failure(-9), 2: Failure(-15)},
            (1, "killed by SIGKILL"),
        ),
        (
            {0: Failure(1, report(0, "timeout", 1.0)), 1: Failure(-9)},
            (1, "no response within the collective timeout of 5 s (stopped or hung)"),
        ),
        ({0: Failure(1, report(0, "lost", 1.0)), 1: Failure(3)}, (1, "exited with code 3")),
        # a rank stopped as it started, before it could report (seventeenth round)
        ({1: Failure(-15)}, (1, "stopped by SIGTERM")),
        ({0: Failure(-15), 1: Failure(130)}, (1, "interrupted by SIGINT")),
        # SIGTERM to rank 1 as it started: its report's time tells it from the agent's stop
        (
            {
                0: Failure(143, report(0, "stopped", 2.0, "S")),
                1: Failure(143, report(1, "stopped", 1.0, "S")),
            },
            (1, "S"),
        ),
        ({0: Failure(-15), 1: Failure(143, report(1, "stopped", 1.0, "S"))}, (1, "S")),
        (
            {0: Failure(-9), 1: Failure(143, report(1, "stopped", 1.0, "S"))},
            (0, "killed by SIGKILL"),
        ),
        (
            {
                1: Failure(1, report(1, "lost", 2.0, "B")),
                0: Failure(1, report(0, "lost", 1.0, "A")),
            },
            (0, "A"),
        ),
    ],
)
def test_the_verdict_names_the_first_to_fail(failures, expected):
    assert faults.verdict(failures, timeout_s=5) == expected


@pytest.mark.parametrize(
    "failures, agent_stopped, expected",
    [
        # rank 1 killed by SIGTERM before its handler; rank 0 (pid 10) stopped by the agent
        (
            {1: Failure(-15, pid=11), 0: Failure(143, report(0, "stopped", 2.0, "S"), 10)},
            {10},
            (1, "stopped by SIGTERM"),
        ),
        # both training, so silent: rank 0 is no longer named for being the lowest
        ({0: Failure(-15, pid=10), 1: Failure(-15, pid=11)}, {10}, (1, "stopped by SIGTERM")),
        # the other way round, as before: rank 0 stopped as it started, rank 1 by the agent
        (
            {0: Failure(143, report(0, "stopped", 1.0, "S"), 10), 1: Failure(-15, pid=11)},
            {11},
            (0, "S"),
        ),
        # a rank the agent stopped that hung is still the one that timed the others out
        (
            {0: Failure(1, report(0, "timeout", 1.0), 10), 1: Failure(-9, pid=11)},
            {11},
            (1, "no response within the collective timeout of 5 s (stopped or hung)"),
        ),
        # forty-eighth round: rank 0 stopped by SIGTERM as the ranks connected; rank 1,
        # blocked in gloo's connect, outlived the agent's SIGTERM and got its SIGKILL
        (
            {0: Failure(143, report(0, "stopped", 1.0, "S"), 10), 1: Failure(-9, pid=11)},
            {11},
            (0, "S"),
        ),
        # a SIGKILL the agent is not heard to have followed up is no stop of its own
        (
            {0: Failure(143, report(0, "stopped", 1.0, "S"), 10), 1: Failure(-9, pid=11)},
            {12},
            (1, "killed by SIGKILL"),
        ),
        # fifty-first round: rank 0 SIGSTOPped (in a checkpoint's write); rank 1 reported it
        # silent; the agent's SIGTERM then reached rank 0, whose "stopped" report was named
        (
            {
                0: Failure(143, report(0, "stopped", 2.0, "S"), 10),
                1: Failure(1, report(1, "timeout", 1.0, "T"), 11),
            },
            {10},
            (0, "no response within the collective timeout of 5 s (stopped or hung)"),
        ),
        # and without a timeout report, the agent's stop is said as one
        (
            {
                0: Failure(143, report(0, "stopped", 2.0, "S"), 10),
                1: Failure(1, report(1, "lost", 1.0, "L"), 11),
            },
            {10},
            (1, "L"),
        ),
    ],
)
def test_the_verdict_never_names_a_rank_the_agent_stopped_for_an_earlier_death(
    failures, agent_stopped, expected
):
    """Found by the twenty-fifth round: SIGTERM to rank 1 right after it existed (before its
    own handler, so no report: exit -15) ended the run with "training failed on rank 0 …:
    stopped by SIGTERM": rank 0, which the agent stopped as a consequence, was the one rank
    that reported. The pids the agent stopped itself (`AgentStops`) tell the ranks that
    ended before it acted: those came first."""
    assert faults.verdict(failures, timeout_s=5, agent_stopped=agent_stopped) == expected


STALLED = "no response within the collective timeout of 5 s (stopped or hung)"


@pytest.mark.parametrize(
    "failures, stalled, expected",
    [
        # rank 1 stopped as it started, killed by the launcher; rank 0 stopped by the agent
        (
            {0: Failure(143, report(0, "stopped", 1.0, "S"), 10), 1: Failure(-9, pid=11)},
            {1},
            (1, STALLED),
        ),
        # not the launcher's: a SIGKILL is what it says
        (
            {0: Failure(143, report(0, "stopped", 1.0, "S"), 10), 1: Failure(-9, pid=11)},
            (),
            (1, "killed by SIGKILL"),
        ),
        # a rank's own error still comes first
        ({0: Failure(1, report(0, "raised", 1.0, "E"), 10), 1: Failure(-9, pid=11)}, {1}, (0, "E")),
    ],
)
def test_the_verdict_names_a_rank_the_launcher_killed_for_being_stopped(
    failures, stalled, expected
):
    """With the thirty-seventh round's fix (`faults.StoppedRanks`): the rank the launcher
    killed for being stopped the collective timeout as it started is named as stopped or
    hung, not for the SIGKILL that ended it; no collective had timed out to say so."""
    assert faults.verdict(failures, 5, {10}, (), stalled) == expected


EARLY = "exited with code 0 before the run ended"


@pytest.mark.parametrize(
    "failures, rooms, expected",
    [
        # the peer that lost it reported; rank 1 exited 0 with its room left
        ({0: Failure(1, report(0, "lost", 1.0))}, [1], (1, EARLY)),
        # its peer timed out: it did not hang, it left
        ({0: Failure(1, report(0, "timeout", 1.0))}, [1], (1, EARLY)),
        # every rank exited 0 (the agent's success), rank 0 before its end
        ({}, [0], (0, EARLY)),
        # a rank that ended normally gave its room back: not named
        ({0: Failure(1, report(0, "lost", 1.0))}, [], (0, "m")),
        # a rank's own error still comes first; one the agent stopped never does
        ({0: Failure(1, report(0, "raised", 1.0, "E"))}, [1], (0, "E")),
        ({0: Failure(-15, pid=10)}, [1], (1, EARLY)),
    ],
)
def test_the_verdict_names_a_rank_that_exited_0_before_the_run_ended(
    tmp_path, failures, rooms, expected
):
    """Found by the thirtieth round: torch's agent lists a rank that exited 0 nowhere, so one
    that left mid-run (`os._exit(0)` in data code) was never named: its peer was, for the
    connection it lost. `ended_early` finds such a rank by the room of its report
    (`errorfile.reserve`), which a rank gives back only at its normal end."""
    from executor.launch import ended_early, error_file

    for rank in rooms:
        Path(f"{error_file(tmp_path, rank)}.tmp").touch()
    early = ended_early(tmp_path, {0, 1} - set(failures))
    assert faults.verdict(failures, 5, {10}, early) == expected


# Two ranks as torch's agent runs them (`start_processes`: its SubprocessContext, its log):
# rank 1 dies of SIGTERM with no report once rank 0 listens; rank 0, stopped by the agent,
# reports that it was stopped, as a rank does that is still starting.
RANK_0 = """trap 'printf %s "$REPORT" > "$TORCHELASTIC_ERROR_FILE"; exit 143' TERM
: > "$READY"
while :; do sleep 0.02; done"""
RANK_1 = 'while [ ! -e "$READY" ]; do sleep 0.02; done; kill -TERM $$'


@pytest.mark.timeout(60)
def test_the_launcher_hears_which_ranks_the_agent_stopped(tmp_path):
    """Found by the twenty-fifth round (as the test above): the launcher learns from torch's
    agent itself which ranks it stopped (its "closing signal" log line, `AgentStops`), so the
    verdict names rank 1, dead of a SIGTERM before it could report, not rank 0 that reported
    the agent's SIGTERM."""
    from torch.distributed.elastic.multiprocessing import start_processes

    from executor.launch import RankLogs

    stopped = faults.Report(0, "stopped", time.time() + 5, "stopped by SIGTERM").to_json()
    shared = {"READY": str(tmp_path / "ready"), "REPORT": stopped, "PATH": os.environ["PATH"]}
    envs = {rank: {**shared, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in (0, 1)}
    # torch's start installs its own handlers in this process (as in a launcher) and never
    # puts the old ones back: a later test found SIGINT taken by them.
    stops_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    handlers = {signum: signal.getsignal(signum) for signum in stops_signals}
    try:
        with faults.AgentStops() as stops:
            ranks = start_processes(
                "ranks", "/bin/sh", {0: ("-c", RANK_0), 1: ("-c", RANK_1)}, envs, RankLogs(tmp_path)
            )
            done = ranks.wait(timeout=30, period=0.02)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert done is not None and sorted(done.failures) == [0, 1]
    assert faults.Report.from_error_data(done.failures[0].error_file_data).kind == "stopped"
    assert stops.pids == {done.failures[0].pid}
    assert faults.verdict(done.failures, 5, stops.pids) == (1, "stopped by SIGTERM")


@pytest.mark.parametrize(
    "exc, kind",
    [
        (faults.SignalInterrupt(), "interrupted"),
        (KeyboardInterrupt(), "raised"),  # raised by code, not a SIGINT (twenty-eighth round)
        (ValueError("bad sample"), "raised"),
        (RuntimeError("[../gloo/transport/tcp/pair.cc:537] Connection reset by peer"), "lost"),
        (
            RuntimeError("[../gloo/unbound_buffer.cc:78] Timed out waiting 5000ms for recv"),
            "timeout",
        ),
    ],
)
def test_a_rank_classifies_its_own_failure(exc, kind):
    assert faults.classify(exc) == kind


@pytest.mark.parametrize(
    "exc, kind, message, line, code",
    [
        (
            Interrupted(),
            "interrupted",
            "interrupted by SIGINT",
            "pipeplan: rank 3: interrupted",
            130,
        ),
        (
            Stopped(signal.SIGTERM),
            "stopped",
            "stopped by SIGTERM",
            "pipeplan: rank 3: stopped by SIGTERM",
            143,
        ),
        (
            Stopped(signal.SIGHUP),
            "stopped",
            "stopped by SIGHUP",
            "pipeplan: rank 3: stopped by SIGHUP",
            129,
        ),
        (
            StartAbandoned("gave up after 2 s waiting at h:1"),
            "raised",
            "gave up after 2 s waiting at h:1",
            "pipeplan: error: rank 3: gave up after 2 s waiting at h:1",
            2,
        ),
    ],
)
def test_a_rank_ended_while_waiting_for_its_peers_says_it_as_the_cli_does(
    exc, kind, message, line, code
):
    """Found by the twenty-first round: a rank waiting for its peers exited 143 on SIGTERM
    with no line (and took no Ctrl-C). Ended in that wait, its report (for `pipeplan run`'s
    verdict) says what ended it, and its one console line and exit code are the CLI's (the
    line naming the rank: the twenty-fifth round)."""
    from executor.launch import start_line

    report = faults.write_report(exc, rank=3)
    assert (report.kind, report.message) == (kind, message)
    assert start_line(exc, 3) == (line, code)
    assert start_line(ValueError("x"), 3) is None  # any other failure: traceback, then its line


def test_a_rank_interrupted_mid_run_says_interrupted_without_a_traceback():
    """Found by the forty-seventh round: Ctrl-C of torchrun mid-run made each rank print a
    15-line traceback of pipeplan's own SignalInterrupt and "pipeplan: error: rank 0:
    interrupted by SIGINT"; the other rank, whose gloo connection closed as it unwound,
    printed both tracebacks. A rank's own SIGINT, or a failure raised while it unwound, is
    the line a rank interrupted as it waited prints, exit 130; a KeyboardInterrupt code
    raised itself is not a signal, and stays a failure."""
    from executor.faults import SignalInterrupt
    from executor.launch import start_line

    interrupted = ("pipeplan: rank 1: interrupted", 130)
    assert start_line(SignalInterrupt(), 1) == interrupted
    try:
        try:
            raise SignalInterrupt
        except SignalInterrupt:
            raise RuntimeError("[gloo] Connection closed by peer") from None
    except RuntimeError as unwound:
        assert unwound.__context__ is not None
        assert start_line(unwound, 1) == interrupted
    assert start_line(KeyboardInterrupt(), 1) is None
    assert start_line(RuntimeError("[gloo] Connection closed by peer"), 1) is None


@pytest.mark.parametrize(
    "exc", [Interrupted(), Stopped(signal.SIGTERM), Stopped(signal.SIGHUP), StartAbandoned("x")]
)
@pytest.mark.parametrize("rank", [0, 1, 12])
def test_every_line_a_rank_prints_as_it_waits_names_the_rank(exc, rank):
    """Found by the twenty-fifth round: under torchrun, rank 1 stopped by the agent while it
    waited for its peers printed `pipeplan: stopped by SIGTERM` after rank 0's refusal, which
    read as if the torchrun command itself had been stopped. Every line a rank prints names
    it, as its error lines do: `pipeplan: rank 1: stopped by SIGTERM`."""
    from executor.launch import start_line

    line, _ = start_line(exc, rank)
    assert re.fullmatch(rf"pipeplan: (error: )?rank {rank}: \S.*", line), line


def test_a_rank_whose_report_cannot_be_written_still_exits_leaving_no_partial_report(
    tmp_path, monkeypatch
):
    """Found by the fifteenth round (the class of its full-disk findings): a rank failing on
    a full disk wrote its error report to the same disk; the write raised inside the rank's
    last handler, so the rank died in a second traceback before its exit code, and
    `rank-R.error.json.tmp` stayed in logs/. The report is returned (the rank exits with
    its code, which the launcher reports) and no partial report stays. (Without the room
    `errorfile.reserve` keeps: a rank under torchrun, or one that started on a full disk.)"""
    import errno

    from executor import errorfile

    error_file = tmp_path / "rank-0.error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    real_write = errorfile._write_all

    def full_disk(fd, data):
        real_write(fd, data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(errorfile, "_write_all", full_disk)
    report = faults.write_report(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), rank=0)
    assert (report.kind, faults.exit_code(report)) == ("raised", faults.EXIT_FAILED)
    assert list(tmp_path.iterdir()) == []


def test_a_torchrun_ranks_report_never_replaces_a_file_that_is_there(tmp_path, monkeypatch):
    """Found by the fifty-third round: TORCHELASTIC_ERROR_FILE set by hand to the run's own
    run.json (or any file) was replaced by a refused rank's report, and the run could not be
    read again. torchrun names a new file for each attempt: a report of a rank that reserved
    no room is written only where nothing is; one where nothing is still is."""
    from executor import errorfile

    kept = tmp_path / "run.json"
    kept.write_text('{"schema_version": 1}\n')
    monkeypatch.setenv(errorfile.ENV, str(kept))
    assert not errorfile.write(0, "raised", time.time(), "WORLD_SIZE=2: prepared for 1")
    assert kept.read_text() == '{"schema_version": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    new = tmp_path / "error.json"
    monkeypatch.setenv(errorfile.ENV, str(new))
    assert errorfile.write(0, "raised", time.time(), "WORLD_SIZE=2: prepared for 1")
    assert json.loads(new.read_text())["pipeplan"]["error"] == "WORLD_SIZE=2: prepared for 1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json", "run.json"]


def test_a_rank_whose_run_folder_moved_writes_no_report_into_what_is_there_now(
    tmp_path, monkeypatch
):
    """Found by the thirty-second round: a run folder moved mid-run, and another run's folder
    put at its path, gained the moved run's reports (`logs/rank-R.error.json`): a report goes
    by path, and the room missing there, it was made as a new file. A rank writes or gives
    back its report's room only in the folder it reserved it in; the launcher says that the
    folder moved, and removes the room where it went."""
    from executor import errorfile

    logs, moved = tmp_path / "k" / "logs", tmp_path / "moved"
    logs.mkdir(parents=True)
    monkeypatch.setenv(errorfile.ENV, str(logs / "rank-0.error.json"))
    errorfile.reserve()  # as the rank starts
    (tmp_path / "k").rename(moved)
    logs.mkdir(parents=True)  # another run's folder at the path
    assert not errorfile.write(0, "raised", time.time(), "runs/k: the run directory moved")
    errorfile.release()
    assert list(logs.iterdir()) == []
    assert [p.name for p in (moved / "logs").iterdir()] == ["rank-0.error.json.tmp"]
    (tmp_path / "k").rename(tmp_path / "other")
    moved.rename(tmp_path / "k")  # back in place: written there as ever
    assert errorfile.write(0, "raised", time.time(), "m")
    assert [p.name for p in logs.iterdir()] == ["rank-0.error.json"]


# A rank on a disk of 1 MiB (a tmpfs in a mount namespace of its own: it goes with the
# process): its room reserved as it starts (argv[3] "room"; else none, as a rank under
# torchrun), then a checkpoint fills the disk, then it reports that failure. Prints its error
# file's text (None if there is none) and the disk's files.
FULL_DISK_RANK = r"""
import errno, json, os, sys
from pathlib import Path

disk = Path(sys.argv[1])
os.environ["TORCHELASTIC_ERROR_FILE"] = str(disk / "rank-0.error.json")
from executor import errorfile, faults
from pipeplan.errors import OutputError

if sys.argv[3] == "room":  # as `pipeplan run`'s rank does as it starts
    errorfile.reserve()
fd = os.open(disk / "checkpoint", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, bytes(1 << 16))
except OSError as exc:
    assert exc.errno == errno.ENOSPC, exc
faults.write_report(OutputError(sys.argv[2]), rank=0)  # the checkpoint still open: disk full
report = Path(os.environ[errorfile.ENV])
print(json.dumps([report.read_text() if report.exists() else None, sorted(os.listdir(disk))]))
"""


def on_a_full_disk(script: str, disk: Path, *args: str) -> str:
    """stdout of `python -c script DISK ARGS…` run with DISK a 1 MiB tmpfs of its own (gone
    when it ends); skips where this host allows no mount namespace."""
    disk.mkdir()
    mount = 'mount -t tmpfs -o size=1M tmpfs "$1" && shift && exec "$@"'
    argv = ["unshare", "--map-root-user", "--mount", "sh", "-c", mount, "sh", str(disk)]
    argv += [sys.executable, "-c", script, str(disk), *args]
    try:
        done = subprocess.run(argv, env=environment(), capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")
    if done.returncode != 0 and "Traceback" not in done.stderr:
        pytest.skip(f"no tmpfs in a mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("room", ["room", "none"])
def test_a_rank_failing_on_a_full_disk_reports_why_from_the_room_it_kept(tmp_path, room):
    """Found by the nineteenth round: a checkpoint filled the run's disk (a 3 MiB tmpfs); rank
    0's report of it, a new file on that disk, could not be written, and the console said
    only `training failed on rank 0 at step 2: exited with code 1`, the cause in rank-0.log
    alone. A rank keeps its report's room from its start: the verdict is rank 0's message,
    and no temporary file stays. Without the room (as the rank was) the disk is full indeed:
    the report is lost, nothing partial left."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    why = "runs/fd1/checkpoints/step-2: cannot write checkpoint step-2 (No space left on device)"
    text, files = json.loads(on_a_full_disk(FULL_DISK_RANK, tmp_path / "disk", why, room))
    error_file = tmp_path / "rank-0.error.json"  # read as torch's agent reads it
    if text is not None:
        error_file.write_text(text)
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(error_file))
    if room == "none":
        assert faults.verdict({0: failure}, timeout_s=600) == (0, "exited with code 1")
        assert files == ["checkpoint"]
        return
    assert faults.verdict({0: failure}, timeout_s=600) == (0, why)
    assert files == ["checkpoint", "rank-0.error.json"]


def test_a_report_fits_the_room_whatever_its_length():
    """The room is fixed (errorfile.ROOM): a traceback or message longer than it is cut, the
    traceback's end (the error) and the message's start kept; the report is still one."""
    from executor import errorfile

    long = faults.Report(0, "raised", 1.0, "m" * 10**6, "frame\n" * 10**5 + "ValueError: E")
    text = long.to_json()
    assert len(text.encode()) <= errorfile.ROOM
    data = json.loads(text)
    assert data["message"]["extraInfo"]["py_callstack"].endswith("ValueError: E")
    shown = faults.Report.from_error_data(data)
    assert shown is not None and shown.message.startswith("m" * 2000)
    short = faults.Report(0, "raised", 1.0, "disk full", "Traceback: disk full")
    assert json.loads(short.to_json())["pipeplan"]["error"] == "disk full"


# ----------------------------------------------------------------------------- failed starts


def fake_launch(monkeypatch, exitcode: int):
    """Have `run_local` start no rank: torch's agent logs rank 1's failure with `exitcode`
    (into launcher.log) and raises what it raises then. Returns the argv of a 1-rank run."""
    import logging

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    import executor.launch

    def launch(config, entrypoint):
        def ranks(*args):
            agent = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
            agent.error("failed (exitcode: %s) local_rank: %s", exitcode, 1)
            failure = ProcessFailure(local_rank=1, pid=1, exitcode=exitcode, error_file="")
            raise ChildFailedError("executor.launch", {1: failure})

        return ranks

    monkeypatch.setattr(executor.launch, "elastic_launch", launch)
    return ["run", "--model", "vit-digits", "--nproc", "1", "--name", "k"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_as_a_rank_runs_its_data_code_is_a_stop_not_the_datas_exit(signum):
    """Found by the seventy-eighth round: a torchrun rank sent SIGTERM while a resume's checks
    ran its data code (`len()`, `load()`) said "data …: len() of the train set exited (code
    143)" and exited 2, blaming data that did nothing: its stop handler's `os._exit` was the
    one data code's exits raise through (`exits_raised`). A rank's early stop handlers end
    the process with its own exit: 143 or 130, nothing raised."""
    code = (
        "import os, signal\n"
        "from executor import launch\n"
        "from pipeplan.exits import exits_raised\n"
        "handler = launch._stopped_as_it_starts if SIG == signal.SIGTERM else "
        "lambda s, f: launch.EXIT(130)\n"
        "signal.signal(SIG, handler)\n"
        "try:\n"
        "    with exits_raised():\n"
        "        os.kill(os.getpid(), SIG)\n"
        "except SystemExit as exc:\n"
        "    print('raised', exc.code)\n"
    )
    if signum == signal.SIGINT:  # the rank's module-level handler, as installed
        source = (ROOT / "executor" / "launch.py").read_text()
        assert "lambda signum, frame: EXIT(130)" in source
    done = subprocess.run(
        [sys.executable, "-c", f"import signal\nSIG = signal.{signum.name}\n{code}"],
        capture_output=True, text=True, timeout=50, cwd=ROOT,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (128 + signum, ""), (done.stdout, done.stderr)


@pytest.mark.parametrize(
    "exitcode, why", [(-signal.SIGTERM, "stopped by SIGTERM"), (130, "interrupted by SIGINT")]
)
def test_a_rank_stopped_as_it_starts_is_named_not_a_missing_run_jsonl(
    tmp_path, monkeypatch, capsys, exitcode, why
):
    """Found by the seventeenth round: SIGTERM or SIGINT to a rank during its start-up (before
    run.jsonl exists) was reported as `pipeplan: error: runs/k/run.jsonl: no such file`: the
    failure's line read the records to say the step. Whatever a rank dies of before run.jsonl
    exists is that rank's failure "before the first step"; the prepared run stays, its logs
    holding why. Found by the twenty-sixth round: the folder could then neither be resumed
    ("no checkpoint to resume from") nor its name run again ("already holds a run"), and the
    line said nothing of it: it says to delete the folder to start the run again."""
    import cli

    argv = [*fake_launch(monkeypatch, exitcode), "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    run = tmp_path / "runs" / "k"
    assert err == (
        f"pipeplan: error: training failed on rank 1 before the first step: {why}; rank logs in "
        f"{run / 'logs'}; no checkpoint to resume from: delete {run} to start it again\n"
    )
    assert (run / "run.json").is_file() and (run / "logs" / "launcher.log").is_file()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("store", ["backend", "agent"])
def test_a_rendezvous_that_fails_is_one_line_naming_the_address_space(
    tmp_path, monkeypatch, capsys, store
):
    """Found by the sixty-fifth round: under `ulimit -v 1200000` torch's agent could not start
    its rendezvous store's thread: a 71-line traceback ending "RuntimeError: Resource
    temporarily unavailable", exit 1. The store's own error (torch's rendezvous, unpatched,
    up to the store it makes) is one line, exit 2, naming the cap where one is set; nothing
    trained, the run's folder goes as a start that met a full disk does. Either store: the
    rendezvous backend's (torch wraps its error: "See inner exception"), or the one the agent
    hosts for the ranks once the rendezvous is done (the round's traceback)."""
    import resource

    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, dynamic_rendezvous

    import cli

    def fails(*args, **kwargs):
        raise RuntimeError("Resource temporarily unavailable")

    # Above `run`'s floor (`cli.MIN_RUN_ADDRESS_SPACE`), which now refuses 1200000 first: a
    # host with more cores starts more threads, and may still fall short above it.
    capped = 3_000_000 << 10  # bytes, as `ulimit -v 3000000` sets it
    getrlimit = resource.getrlimit

    def limits(kind: int) -> tuple[int, int]:
        return (capped, capped) if kind == resource.RLIMIT_AS else getrlimit(kind)

    if store == "backend":
        monkeypatch.setattr(c10d_rendezvous_backend, "TCPStore", fails)
    else:
        monkeypatch.setattr(dynamic_rendezvous.dist, "TCPStore", fails)
    monkeypatch.setattr(resource, "getrlimit", limits)
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "k"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (
        "pipeplan: error: could not start the ranks: torch's rendezvous failed (Resource "
        "temporarily unavailable); each process's address space is capped at 2929 MiB "
        "(ulimit -v): raise it\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(120)
def test_a_burst_of_stops_as_the_agent_starts_is_said_as_the_first(tmp_path):
    """Found by the sixty-fifth round: SIGTERM, SIGINT and SIGHUP sent one after the other to
    `pipeplan run` as its ranks started were said as "interrupted", exit 130, in 1 of 9
    tries. Landing as the agent starts (its Ctrl-C handler, `on_ctrl_c`, installed; SIGTERM
    and SIGHUP still the command's, `cli._stop`), the command's said SIGTERM, the first, and
    the agent's SIGINT then raised over it: `run_local` raised Interrupted. The first that
    arrived is raised. The agent here starts no rank: it takes the burst in C code (no
    handler runs until it returns)."""
    code = (
        "import os, subprocess, sys, time\n"
        "sys.argv = ['pipeplan', *sys.argv[1:]]  # the command's process\n"
        "import cli, executor.launch\n"
        "from pathlib import Path\n"
        "from pipeplan.formats import RunConfig\n"
        "cli._install(dict.fromkeys(cli.STOP_SIGNALS, cli._stop))  # the command's, as `main`\n"
        "def launch(config, entrypoint):\n"
        "    def ranks(*args):\n"
        "        kills = '; '.join(f'kill -{s} {os.getpid()}' for s in ('TERM', 'INT', 'HUP'))\n"
        "        subprocess.Popen(['/bin/sh', '-c', f'sleep 0.5; {kills}'])\n"
        "        end = time.monotonic() + 20\n"
        "        while time.monotonic() < end:\n"
        "            sum(range(10**7))\n"
        "    return ranks\n"
        "executor.launch.elastic_launch = launch\n"
        "try:\n"
        "    executor.launch.run_local(RunConfig(name='k', nproc=1), Path(sys.argv[1]))\n"
        "except BaseException as exc:\n"
        "    print(repr(exc))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=ROOT,
    )
    assert done.stdout == f"Stopped({signal.SIGTERM})\n", done.stderr[-3000:]


def test_the_report_rooms_of_killed_ranks_go_when_the_ranks_have(tmp_path, monkeypatch, capsys):
    """With the nineteenth round's fix (a rank keeps its report's room from its start, for a
    failure on a full disk): the ranks the agent stops with SIGTERM, or SIGKILL, leave their
    rooms (`logs/rank-R.error.json.tmp`); the launcher removes them once every rank is gone,
    as it removes their caches. Nothing temporary stays in logs/."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    import cli
    import executor.launch
    from executor import errorfile

    def launch(config, entrypoint):
        def ranks(*args):
            envs = {0: {"RANK": "0"}, 1: {"RANK": "1"}}
            config.logs_specs.reify(envs)  # as the agent does: each rank's error file
            for env in envs.values():  # each rank keeps its room, then both are killed
                monkeypatch.setenv(errorfile.ENV, env[errorfile.ENV])
                errorfile.reserve()
            # Listed both, as the agent lists every rank that did not exit 0: a rank that
            # did, its room left, ended before the run (the thirtieth round).
            failures = {
                rank: ProcessFailure(rank, rank + 1, exitcode, envs[rank][errorfile.ENV])
                for rank, exitcode in ((0, -signal.SIGTERM), (1, -signal.SIGKILL))
            }
            raise ChildFailedError("executor.launch", failures)

        return ranks

    monkeypatch.setattr(executor.launch, "elastic_launch", launch)
    argv = ["run", "--model", "vit-digits", "--nproc", "2", "--name", "k"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path)]) == 2
    assert "rank 1 before the first step: killed by SIGKILL" in capsys.readouterr().err
    assert not list((tmp_path / "k" / "logs").glob("*.tmp"))


@pytest.mark.parametrize("opens", [True, False], ids=["rename refused", "open refused too"])
def test_a_report_that_could_not_be_renamed_is_read_in_its_room(
    tmp_path, monkeypatch, capsys, opens
):
    """Found by the sixty-fifth round: a run folder made read-only mid-run (a read-only mount
    put over it) refused the rank's report its rename, and its opening for writing: the line
    said "exited with code 1", the cause in rank-0.log alone, `rank-0.error.json.tmp` left
    (64 KiB). The rank writes its report through the room it kept open from its start, and
    where the rename fails the launcher reads it in the room, then removes the room. Here the
    rename fails for a folder at the report's name, and the opening (`opens=False`) as a
    read-only folder refuses it."""
    import errno
    import time

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    import cli
    import executor.launch
    from executor import errorfile

    why = "runs/k/metrics.csv: cannot write in runs/k (Read-only file system)"

    def refused(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)

    def launch(config, entrypoint):
        def ranks(*args):
            envs = {0: {"RANK": "0"}}
            config.logs_specs.reify(envs)  # as the agent does: the rank's error file
            path = envs[0][errorfile.ENV]
            monkeypatch.setenv(errorfile.ENV, path)
            errorfile.reserve()  # as the rank starts
            Path(path).mkdir()  # the rename fails
            with monkeypatch.context() as inside:
                if not opens:  # as a read-only folder refuses every opening for writing
                    inside.setattr(os, "open", refused)
                assert not errorfile.write(0, "raised", time.time(), why)
            raise ChildFailedError("executor.launch", {0: ProcessFailure(0, 1, 1, path)})

        return ranks

    monkeypatch.setattr(executor.launch, "elastic_launch", launch)
    argv = ["run", "--model", "vit-digits", "--nproc", "1", "--name", "k"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path)]) == 2
    assert f"rank 0 before the first step: {why}; rank logs in" in capsys.readouterr().err
    assert not list((tmp_path / "k" / "logs").glob("*.tmp"))


def test_a_failure_is_placed_without_refusing_unreadable_records(tmp_path):
    """The same class: a run.jsonl that is missing, empty or unreadable places the failure as
    well as it can; it is never the error reported instead of the rank's."""
    from executor.launch import failed_at

    records = tmp_path / "run.jsonl"
    assert failed_at(records) == " before the first step"
    records.write_text("")
    assert failed_at(records) == " before the first step"
    records.write_text("not json\n")
    assert failed_at(records) == ""


def test_the_rendezvous_names_its_events_callers_as_torch_does():
    """`name_rendezvous_events_cheaply`: torch's `get_method_name(depth)` answered with the
    frame itself, the same name `inspect.stack()[depth].function` gives, without reading
    every frame's source (1.2 s of CPU per run from a deep stack)."""
    import inspect

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from executor.launch import name_rendezvous_events_cheaply

    def by_inspect(depth: int = 2) -> str:
        stack = inspect.stack()
        return stack[depth].function if len(stack) > depth else "no_method_name"

    def recorded(namer) -> str:  # as `_record` calls it: the name of _record's caller
        return namer()

    def handler_method(namer) -> str:
        return recorded(namer)

    name_rendezvous_events_cheaply()
    assert dynamic_rendezvous.get_method_name is not by_inspect
    got = handler_method(dynamic_rendezvous.get_method_name)
    assert got == handler_method(by_inspect) == "handler_method"
    assert dynamic_rendezvous.get_method_name(10_000) == by_inspect(10_000) == "no_method_name"


def test_the_launch_config_takes_only_the_fields_this_torch_has(tmp_path, monkeypatch):
    """torch 2.11 (a GPU image's, 2026-12-04) has no `shutdown_timeout` or `signals_to_handle`:
    passing them failed every `pipeplan run` there with a TypeError."""
    from dataclasses import field, fields, make_dataclass

    from executor import launch

    config = launch.local_config(2, tmp_path)
    assert config.shutdown_timeout == launch.SHUTDOWN_S
    assert config.signals_to_handle == ",".join(launch.AGENT_HANDLES)

    newer = ("shutdown_timeout", "signals_to_handle")
    older = make_dataclass(
        "LaunchConfig",
        [
            (f.name, f.type, field(default=f.default, default_factory=f.default_factory))
            for f in fields(launch.LaunchConfig)
            if f.name not in newer
        ],
    )
    monkeypatch.setattr(launch, "LaunchConfig", older)
    config = launch.local_config(2, tmp_path)
    assert (config.nproc_per_node, config.max_restarts) == (2, 0)
    assert not any(hasattr(config, name) for name in newer)


# A torchrun rank with `launch.stops_reported` on, then one of three: its main thread blocked
# in C (a mutex it holds, locked again: no signal interrupts it, as in a collective), in
# Python, or in a block that holds stops (a checkpoint's write).
STOPPED_RANK = """
import ctypes, signal, sys, time
from pathlib import Path
from executor import cache, errorfile, launch
from pipeplan.errors import Stopped
from pipeplan.fileio import stops_deferred, stops_raised
errorfile.reserve()
made = Path(sys.argv[2])
made.mkdir()
cache._MADE.append(made)
launch.stops_reported(1)
print("ready", flush=True)
try:
    if sys.argv[1] == "c":
        mutex, libc = ctypes.create_string_buffer(64), ctypes.CDLL(None)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # its own lock again: blocks for good, GIL released
    elif sys.argv[1] == "python":
        while True:
            pass
    elif sys.argv[1] == "own":  # the code's own handler for a while, then pipeplan's again
        ours = signal.signal(signal.SIGUSR1, lambda *a: print("its own", flush=True))
        time.sleep(1.5)
        signal.signal(signal.SIGUSR1, ours)
        time.sleep(1.5)
        print("went on", flush=True)
        sys.exit(0)
    elif sys.argv[1] == "write":  # a checkpoint's write: its clean-up runs
        with stops_raised():
            time.sleep(60)
    else:
        with stops_deferred():
            time.sleep(2)
            print("the block ended", flush=True)
        time.sleep(60)
except Stopped as exc:
    print(f"raised Stopped({exc.signum})", flush=True)
    sys.exit(5)
"""


def _stopped_rank(where: str, signum: int, error_file: Path, made: Path):
    """STOPPED_RANK run at `where`, sent `signum` once ready: (the process, stdout, stderr)."""
    env = {**environment(), "TORCHELASTIC_ERROR_FILE": str(error_file)}
    rank = subprocess.Popen(
        [sys.executable, "-c", STOPPED_RANK, where, str(made)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert rank.stdout.readline() == "ready\n"
    time.sleep(0.3)
    rank.send_signal(signum)
    out, err = rank.communicate(timeout=30)
    return rank, out, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["c", "python", "held", "own"])
def test_a_torchrun_rank_sent_a_stop_signal_says_so_and_removes_its_cache(tmp_path, where):
    """Found by the forty-seventh round: under torchrun a rank sent SIGUSR1 or SIGHUP
    mid-step died by the signal's default action, saying nothing, its /dev/shm folder left.
    Blocked in C, its thread ends it: its line, exit 128 + 10, its report, its cache gone.
    In Python, the handler raises Stopped (reported as every failure: one line, not two).
    In a block that holds stops, nothing happens until the block ends; one that comes while
    the code's own handler is installed is that handler's."""
    error_file, made = tmp_path / "error.json", tmp_path / "shm-node0"
    rank, out, err = _stopped_rank(where, signal.SIGUSR1, error_file, made)
    if where == "c":
        assert (rank.returncode, out, err) == (138, "", "pipeplan: rank 1: stopped by SIGUSR1\n")
        report = json.loads(error_file.read_text())
        assert "stopped by SIGUSR1" in json.dumps(report)
        assert not made.exists()
    elif where == "own":  # the code's handler had it: the rank goes on
        assert (rank.returncode, out, err) == (0, "its own\nwent on\n", "")
    else:
        said = ("the block ended\n" if where == "held" else "") + "raised Stopped(10)\n"
        assert (rank.returncode, out, err) == (5, said, "")
        assert made.exists()  # the main thread's failure path removes it (`main`)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["c", "python", "held", "write"])
def test_a_torchrun_rank_the_agent_stops_removes_its_cache_in_silence(tmp_path, where):
    """Found by the forty-ninth round: under torchrun, once rank 1 had failed, the agent's
    SIGTERM killed rank 0 by its default action, and the node's /dev/shm folder rank 0 had
    made stayed. SIGTERM still ends the rank at once and in silence (the agent's stop: no
    line, no report), its cache removed first; in a block that holds stops, once it ends; in
    a write's block (`stops_raised`), raised as before, for the write's clean-up."""
    error_file, made = tmp_path / "error.json", tmp_path / "shm-node0"
    rank, out, err = _stopped_rank(where, signal.SIGTERM, error_file, made)
    if where == "write":
        assert (rank.returncode, out, err) == (5, "raised Stopped(15)\n", "")
        return
    said = "the block ended\n" if where == "held" else ""
    # Blocked in C, the rank's thread ends it, with the exit code a shell gives that death.
    code = 128 + signal.SIGTERM if where == "c" else -signal.SIGTERM
    assert (rank.returncode, out, err) == (code, said, "")
    assert not made.exists() and not error_file.exists()


# A torchrun rank that has trained (`stops_reported` on, Ctrl-C its own), sent a stop signal
# as its exit callbacks run: a callback sends it and goes on in Python, where its handler runs.
STOPPED_AT_EXIT = """
import atexit, os, signal, sys, time
from executor import errorfile, faults, launch
errorfile.reserve()
launch.stops_reported(1)
signal.signal(signal.SIGINT, faults.on_sigint)
def callback():
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    time.sleep(2)
    print("the callback ended", flush=True)
atexit.register(callback)
errorfile.release()
launch.exit_without_teardown(0, sys.stderr, 1)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("name", "line", "code"),
    [("SIGHUP", "stopped by SIGHUP", 129), ("SIGUSR1", "stopped by SIGUSR1", 138),
     ("SIGINT", "interrupted", 130)],
)  # fmt: skip
def test_a_torchrun_rank_stopped_as_its_exit_callbacks_run_ends_with_the_stops_line(
    tmp_path, name, line, code
):
    """Found open by the forty-eighth session: a stop that came as a torchrun rank that had
    trained ran its exit callbacks was raised into the callback and said as its failure
    ("the exit callback … raised Stopped"), the rank exiting 0. It ends the rank there, as a
    stop ends the command there: the stop's one line, its exit code, its report."""
    error_file = tmp_path / "error.json"
    env = {**environment(), "TORCHELASTIC_ERROR_FILE": str(error_file)}
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_AT_EXIT, name],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (code, "", f"pipeplan: rank 1: {line}\n")
    assert line in json.dumps(json.loads(error_file.read_text()))


# A torchrun rank started with SIGHUP and SIGTERM ignored (`nohup torchrun --signals-to-handle
# SIGINT,SIGQUIT …`), sent both in its wait for the others, then mid-run.
IGNORING_RANK = """
import os, signal
for signum in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(signum, signal.SIG_IGN)
from executor import launch
with launch.stoppable():
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGTERM)
launch.stops_reported(1)
os.kill(os.getpid(), signal.SIGHUP)
os.kill(os.getpid(), signal.SIGTERM)
stops = (signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1)
print("went on", [signal.getsignal(signum) == signal.SIG_IGN for signum in stops])
"""


@pytest.mark.timeout(60)
def test_a_rank_keeps_the_stop_signals_it_started_with_ignored():
    """Found by the sixty-third round: `nohup torchrun --signals-to-handle SIGTERM,SIGINT,
    SIGQUIT …` (torch's agent then leaves nohup's SIGHUP ignored for the ranks) still ended
    with `pipeplan: rank 0: stopped by SIGHUP`: the rank's wait for the others (`stoppable`)
    and its stops mid-run (`stops_reported`) took every stop signal over. An ignored one
    stays ignored (as in the command, `startup.ignored`); the others are taken."""
    done = subprocess.run(
        [sys.executable, "-c", IGNORING_RANK],
        cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "went on [True, True, False]\n"), done.stderr


def test_the_agent_stops_the_other_ranks_within_the_configs_shutdown_time():
    """Found by the forty-eighth round: once a rank failed, torch's agent gave the others its
    own 30 s before SIGKILL, not the config's `shutdown_timeout`: a rank blocked in gloo's
    connect held the run's line 30 s. `pipeplan run` bounds every stop by SHUTDOWN_S."""
    from torch.distributed.elastic.multiprocessing.api import PContext

    from executor import launch

    launch.stop_ranks_within_shutdown_timeout()
    launch.stop_ranks_within_shutdown_timeout()  # once: not wrapped twice
    asked = []

    class Ranks:  # what `PContext.close` touches
        _tail_logs, filtered_stdout, filtered_stderr = (), None, None

        def _close(self, death_sig, timeout):
            asked.append(timeout)

    for timeout in ((), (30,), (5,)):
        PContext.close(Ranks(), None, *timeout)
    assert asked == [launch.SHUTDOWN_S, launch.SHUTDOWN_S, 5] and launch.SHUTDOWN_S < 30


def test_torchruns_root_cause_is_the_own_fault_within_one_second():
    """Found by the fifty-first round: torch's agent names the root cause by an error file's
    whole-second timestamp, the lowest rank on a tie: rank 0, which lost rank 1 in the second
    rank 1 raised, was named (3 of 14). An own fault's second is taken down, a
    consequence's up, so within one second the fault sorts first."""
    stamps = {
        kind: int(
            json.loads(report(r, kind, 100.6 if kind == "lost" else 100.3).to_json())["message"][
                "extraInfo"
            ]["timestamp"]
        )
        for r, kind in ((0, "lost"), (1, "raised"))
    }
    assert stamps == {"lost": 101, "raised": 100}
    assert (
        int(
            json.loads(report(0, "interrupted", 7.9).to_json())["message"]["extraInfo"]["timestamp"]
        )
        == 7
    )


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGHUP, signal.SIGRTMIN + 3])
def test_torchruns_root_cause_is_the_rank_a_stop_from_outside_ended(signum):
    """Found by the sixty-third round: under torchrun, SIGUSR1 or SIGHUP to rank 1 made
    torchrun's summary name rank 0 as the root cause ("Signal 15 (SIGTERM)"): the agent
    SIGTERMed it once rank 1 had ended, and torch stamps a rank without a report with the
    second it saw it, while rank 1's "stopped" report took its second up, as a consequence's.
    Only SIGTERM, the agent's own stop, is a consequence; a stop by any other signal came
    from outside, its second taken down as an own fault's."""

    def stamp(signum: int, at: float) -> int:
        why = faults.describe(Stopped(signum), "stopped")
        data = json.loads(report(1, "stopped", at, why).to_json())
        return int(data["message"]["extraInfo"]["timestamp"])

    assert stamp(signum, 100.6) == 100
    assert stamp(signal.SIGTERM, 100.3) == 101


def test_a_rank_killed_by_sigbus_is_said_to_be_likely_a_full_disk():
    """Found by the fifty-seventh round: a disk filled by another process under the
    activation cache's mapped files killed rank 0 by SIGBUS, and the run's line said "killed
    by SIGBUS" alone; its resume then failed the same way. The line says what a SIGBUS there
    means and to free space; another signal is said as before. The fifty-eighth: a SIGBUS of
    the data's own mapped file cut short (the disk far from full) was blamed on a full disk:
    both causes are said, the disk's as a condition."""
    import signal

    said = faults.verdict({0: Failure(-signal.SIGBUS, pid=10)}, timeout_s=5)
    assert said[0] == 0 and said[1].startswith("killed by SIGBUS (an access to a memory-mapped")
    assert "one cut short, or one written on a full disk" in said[1]
    assert said[1].endswith("if a disk is full, free some space before resuming)")
    assert faults.verdict({0: Failure(-signal.SIGSEGV, pid=10)}, timeout_s=5) == (
        0,
        "killed by SIGSEGV",
    )
