"""The Slurm job script that ``engine/cluster.py``'s executor writes: Slurm
signals a job before its time limit, never as it starts."""
import pytest

from mmseg_elliptical.engine import cluster


@pytest.mark.parametrize('time_min, delay', [(1, 30), (2, 60), (3, 90),
                                             (60, 90)])
def test_a_job_is_signalled_at_most_half_its_time_before_the_limit(
        tmp_path, srun_on_path, time_min, delay):
    ex = cluster.executor('slurm', str(tmp_path),
                          cluster.SlurmOptions('debug', time_min=time_min))
    script = ex._make_submission_file_text('true', 'uid')
    assert f'#SBATCH --time={time_min}\n' in script
    assert f'#SBATCH --signal=USR2@{delay}\n' in script
