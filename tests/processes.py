"""Process helpers of the tests: a command run to its end (or killed with
its process group), the tools as modules or as ``__main__``, a free port.
"""
import importlib.util
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Sequence

import pytest
from builders import ROOT


@contextmanager
def cpu_bound_process() -> Iterator[subprocess.Popen]:
    """A process that spins on one core for the block (a loaded machine),
    then is killed."""
    proc = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


#: The variables torchrun sets in its workers (and
#: ``engine.launch.slurm_environment`` in a task of srun): left in the tests'
#: own environment they reach every later subprocess, e.g. a stray
#: ``MASTER_ADDR`` sends the torchrun of ``tools/dist_launch.sh`` to another
#: host (tests/conftest.py, ``no_launch_variables_left``).
LAUNCH_VARIABLES = ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE',
                    'LOCAL_RANK')


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for torchrun and gloo)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch_env(**extra: str) -> Dict[str, str]:
    """The environment of a launch script in the tests: this interpreter
    (``PYTHON``), a free ``PORT``, one OpenMP thread, and ``extra``."""
    return dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(free_port()),
        OMP_NUM_THREADS='1',
        **extra)


def descendants(pid: int) -> list:
    """The processes below ``pid`` (children first, then theirs), read
    from ``/proc``; empty where there is no ``/proc``."""
    parents = {}
    for entry in os.listdir('/proc') if osp.isdir('/proc') else ():
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(')', 1)[1].split()[1])
    found, level = [], [pid]
    while level:
        level = [p for p, parent in parents.items() if parent in level]
        found += level
    return found


def dump_stacks(pid: int) -> None:
    """SIGABRT to every process below ``pid``, deepest first: those run with
    ``PYTHONFAULTHANDLER=1`` print their threads' Python stacks (where a
    hung command waits) to their stderr and end."""
    for child in reversed(descendants(pid)):
        try:
            os.kill(child, signal.SIGABRT)
        except ProcessLookupError:
            pass


def run_command(
        args: Sequence[str],
        timeout: float = 300,
        env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``args`` in the repository root to a zero exit status.

    The test fails with the output's tail on another exit status, or when the
    command has not finished after ``timeout`` seconds: its process group
    (the command runs in a session of its own: a shell script and the
    torchrun it starts) then gets SIGTERM, on which torchrun stops its
    workers (they run in sessions of their own), and SIGKILL 30 s later.
    Before that, the Python processes below it print their stacks
    (``PYTHONFAULTHANDLER=1`` and SIGABRT), which the failure shows.
    The output goes through files, so a process left behind cannot block
    the test on a pipe.

    Args:
        args (Sequence[str]): The command line.
        timeout (float): Seconds. Defaults to 300.
        env (dict, optional): The environment. Defaults to this process's
            with ``OMP_NUM_THREADS=1``.

    Returns:
        subprocess.CompletedProcess: With ``stdout`` and ``stderr`` (str).
    """
    if env is None:
        env = dict(os.environ, OMP_NUM_THREADS='1')
    env = dict(env, PYTHONFAULTHANDLER='1')
    with tempfile.TemporaryFile('w+') as out, \
            tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout)
            failure = f'exit status {proc.returncode}' \
                if proc.returncode else None
        except subprocess.TimeoutExpired:
            dump_stacks(proc.pid)
            time.sleep(2)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(30)
                    break
                except ProcessLookupError:  # all ended on SIGABRT
                    break
                except subprocess.TimeoutExpired:
                    continue
            proc.wait()
            failure = f'not finished after {timeout} s'
            timed_out = True
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if failure:
        pytest.fail(
            f'{" ".join(args)[-300:]}: {failure}\n'
            f'--- stdout:\n{stdout[-2000:]}\n'
            f'--- stderr:\n{stderr[-12000 if timed_out else -4000:]}',
            pytrace=False)
    return subprocess.CompletedProcess(args, 0, stdout, stderr)


def load_tool(path: str):
    """The module of a command-line tool, e.g.
    ``load_tool('analysis_tools/collapse.py')`` (under ``tools/``).

    It is registered in ``sys.modules`` (dataclasses of the tool look their
    module up there)."""
    name = 'tool_' + osp.splitext(path)[0].replace('/', '_')
    spec = importlib.util.spec_from_file_location(
        name, osp.join(ROOT, 'tools', path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def run_tool_main(monkeypatch, path: str, *args: str) -> None:
    """Run ``tools/<path>`` as ``__main__`` in this process with ``args``
    on its command line."""
    import runpy
    monkeypatch.setattr(sys, 'argv', [osp.basename(path), *args])
    runpy.run_path(osp.join(ROOT, 'tools', path), run_name='__main__')


def refused(capsys, main, argv: Sequence[str]) -> str:
    """Run a tool's ``main`` on a bad command line: it must exit with
    status 2 (argparse's) and at most two lines on stderr (the usage line
    and the error), no traceback.

    Returns:
        str: The error line.
    """
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(list(argv))
    err = capsys.readouterr().err
    assert stop.value.code == 2, (stop.value.code, err)
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2 and 'Traceback' not in err, err
    assert ': error: ' in lines[-1], err
    return lines[-1]


def run_tool(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``tools/<script>`` in a fresh interpreter; its output."""
    proc = run_command(
        [sys.executable,
         osp.join(ROOT, 'tools', script), *args],
        timeout=timeout)
    return proc.stdout + proc.stderr


# ------------------------------------------- analysis: tiny saved models

#: One tiny backbone per family: its config and, by hand, the number of
#: layers, the stage of each and the stride and grid of each stage on a
#: 64 x 64 input (BEiT and MAE: 32 x 32 crops of their img_size).
