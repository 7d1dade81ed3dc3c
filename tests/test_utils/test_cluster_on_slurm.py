"""``utils/cluster.py``'s jobs on a real single-node Slurm
(``tests/slurm_cluster.py``): Slurm's warning signal that comes while a
task still loads its function (before submitit listens) is lost, not fatal,
and the job ends with its function's result."""
import os.path as osp
import time

import pytest

from mmseg_elliptical.utils import cluster

pytestmark = pytest.mark.slow

#: Seconds the task spends importing :data:`SLOW_START` (only in a job).
LOAD_S = 8

#: A module that a job's task imports as it loads its function.
SLOW_START = f'''
import os, time

if 'SLURM_JOB_ID' in os.environ:  # the task, loading the function
    time.sleep({LOAD_S})


def run():
    return 'done'
'''


def test_a_warning_while_the_task_loads_is_lost_not_fatal(
        slurm, tmp_path, monkeypatch) -> None:
    (tmp_path / 'slow_start.py').write_text(SLOW_START)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv('PYTHONPATH', str(tmp_path))  # sbatch exports it
    import slow_start
    ex = cluster.executor('slurm', str(tmp_path / 'job'),
                          cluster.SlurmOptions(slurm.partition, time_min=5))
    job = cluster.submit(ex, slow_start.run)
    log = cluster.log_path(job)
    end = time.monotonic() + 120
    while not (osp.exists(log) and 'Loading pickle' in open(log).read()):
        assert time.monotonic() < end, slurm.job_state(str(job.job_id))
        time.sleep(0.2)
    slurm.command('scancel', '--signal=USR2', str(job.job_id))
    while not cluster.ended(job):
        assert time.monotonic() < end, slurm.job_state(str(job.job_id))
        time.sleep(0.5)
    assert cluster.outcome(job, 'the job') == 'done', open(log).read()
    assert slurm.final_state(str(job.job_id)) == 'COMPLETED'
