"""The Slurm job script that ``utils/cluster.py``'s executor writes: Slurm
signals a job before its time limit, never as it starts, and the signal
reaches only submitit's task, once it listens; a job's error left before
Slurm records its end is read by the state Slurm ends it with."""
import shlex
import signal
import subprocess
import sys

import pytest
import submitit

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


class ErrorLeftAtTheLimit(submitit.SlurmJob):
    """A Slurm job whose task left an error (its training child terminated
    at the time limit) while Slurm still shows it running: Slurm's states
    come from ``states``, one per look."""

    def __init__(self, folder, states):  # no sacct: the looks are scripted
        super().__init__(folder, '7')
        self.states = list(states)
        self.looks = 0

    def results(self):
        raise RuntimeError('Training ... failed (exit status -15)')


def test_an_error_left_before_slurm_records_the_time_limit_reads_as_it(
        tmp_path, monkeypatch) -> None:
    job = ErrorLeftAtTheLimit(tmp_path, ['RUNNING', 'COMPLETING', 'TIMEOUT'])

    def look(j, force=False):
        j.looks += 1
        return j.states[min(j.looks, len(j.states)) - 1]

    monkeypatch.setattr(cluster, 'state', look)
    monkeypatch.setattr(cluster.time, 'sleep', lambda s: None)
    job.paths.result_pickle.parent.mkdir(parents=True, exist_ok=True)
    job.paths.result_pickle.touch()
    with pytest.raises(cluster.JobError) as e:
        cluster.outcome(job, 'ell seed 0')
    assert str(e.value) == (f'ell seed 0: job 7 passed its time limit; its '
                            f'log: {cluster.log_path(job)}')
    # A job Slurm ends as failed still reads as failed, with its error.
    job = ErrorLeftAtTheLimit(tmp_path, ['COMPLETING', 'FAILED'])
    with pytest.raises(
            cluster.JobError,
            match='job 7 failed; its log: .*\n'
            'Training ... failed') as e:
        cluster.outcome(job, 'ell seed 0')
    assert job.looks == 2
