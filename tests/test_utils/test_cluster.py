"""The Slurm job script that ``utils/cluster.py``'s executor writes: Slurm
signals a job before its time limit, never as it starts, and the signal
reaches only submitit's task, once it listens."""
import shlex
import signal
import subprocess
import sys

import pytest

from mmseg_elliptical.utils import cluster


@pytest.mark.parametrize('time_min, delay', [(1, 30), (2, 60), (3, 90),
                                             (60, 90)])
def test_a_job_is_signalled_at_most_half_its_time_before_the_limit(
        tmp_path, srun_on_path, time_min, delay):
    ex = cluster.executor('slurm', str(tmp_path),
                          cluster.SlurmOptions('debug', time_min=time_min))
    script = ex._make_submission_file_text('true', 'uid')
    assert f'#SBATCH --time={time_min}\n' in script
    assert f'#SBATCH --signal=USR2@{delay}\n' in script


SELF_SIGNAL = ('import os, signal, time; '
               'os.kill(os.getpid(), signal.SIGUSR2); time.sleep(0.2); '
               'print("alive")')


def test_a_child_started_in_the_block_outlives_the_warning() -> None:
    with cluster.warning_signal_blocked():
        shielded = subprocess.run([sys.executable, '-c', SELF_SIGNAL],
                                  capture_output=True,
                                  text=True)
    plain = subprocess.run([sys.executable, '-c', SELF_SIGNAL],
                           capture_output=True,
                           text=True)
    assert (shielded.returncode, shielded.stdout) == (0, 'alive\n')
    assert plain.returncode == -signal.SIGUSR2
    # The block ends with the context: this process takes the signal again.
    assert cluster.WARNING_SIGNAL not in signal.pthread_sigmask(
        signal.SIG_BLOCK, set())


def test_a_task_ignores_the_warning_until_submitit_listens(
        tmp_path, srun_on_path) -> None:
    ex = cluster.executor('slurm', str(tmp_path),
                          cluster.SlurmOptions('debug', time_min=1))
    srun = [
        line for line in ex._make_submission_file_text(
            ex._submitit_command_str, 'uid').splitlines()
        if line.startswith('srun ')
    ]
    assert len(srun) == 1 and cluster.task_python() in srun[0], srun
    # The task's interpreter, run as the script runs it: it survives the
    # signal until a handler (submitit's) is installed.
    task = subprocess.run(
        f'{cluster.task_python()} -c {shlex.quote(SELF_SIGNAL)}',
        shell=True,
        capture_output=True,
        text=True)
    assert (task.returncode, task.stdout) == (0, 'alive\n'), task.stderr
    handled = SELF_SIGNAL.replace(
        'os.kill', 'signal.signal(signal.SIGUSR2, '
        'lambda *a: print("handled")); os.kill')
    task = subprocess.run(
        f'{cluster.task_python()} -c {shlex.quote(handled)}',
        shell=True,
        capture_output=True,
        text=True)
    assert task.stdout == 'handled\nalive\n', task.stderr
