"""A real single-node Slurm for the tests (``tools/misc/slurm_cluster.sh``):
munged, slurmctld and slurmd on this machine, started once per session in a
temporary folder and stopped at its end.

Where Debian's ``slurm-wlm`` and ``munge`` are missing (or the tests do not
run as root) the tests that need it skip with :data:`HOW_TO_RUN`.
"""
import os
import os.path as osp
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, Optional

from builders import ROOT
from processes import launch_env

SCRIPT = osp.join(ROOT, 'tools', 'misc', 'slurm_cluster.sh')
PARTITION = 'debug'
#: The one line of a skipped Slurm test.
HOW_TO_RUN = ('needs a real Slurm: as root, apt-get install -y slurm-wlm '
              'munge, then run the tests again (bash .ci/run does both)')


@dataclass
class Cluster:
    """A started test cluster.

    Attributes:
        folder (str): Its configuration, state and logs.
        conf (str): Its ``slurm.conf`` (``SLURM_CONF`` of its commands).
        partition (str): Its one partition.
    """
    folder: str
    conf: str
    partition: str = PARTITION

    def env(self, **extra: str) -> Dict[str, str]:
        """This process's environment with ``SLURM_CONF`` and ``extra``."""
        return dict(os.environ, SLURM_CONF=self.conf, **extra)

    def command(self, *args: str, timeout: float = 60) -> str:
        """Run a Slurm command (``squeue``, ``scancel``, ...); its stdout."""
        return subprocess.run(
            args,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=timeout).stdout

    def job_state(self, job_id: str) -> Optional[str]:
        """``JobState`` of a job from ``scontrol`` (None: unknown)."""
        proc = subprocess.run(['scontrol', 'show', 'job', '-o', job_id],
                              env=self.env(),
                              capture_output=True,
                              text=True)
        found = re.search(r'JobState=(\S+)', proc.stdout)
        return found.group(1) if found else None

    def final_state(self, job_id: str, timeout: float = 120.) -> Optional[str]:
        """``JobState`` once the job has ended: its result can be written
        (submitit's) while Slurm still tears the job down (RUNNING,
        COMPLETING)."""
        end = time.monotonic() + timeout
        state = self.job_state(job_id)
        while state in ('PENDING', 'RUNNING', 'COMPLETING') and \
                time.monotonic() < end:
            time.sleep(0.5)
            state = self.job_state(job_id)
        return state

    def cpu_job_env(self, tasks: int = 2, **extra: str) -> Dict[str, str]:
        """The environment of a slurm_*.sh script on this cluster: this
        interpreter, ``tasks`` CPU tasks of 1 CPU each, one OpenMP thread,
        and ``extra``."""
        return launch_env(
            SLURM_CONF=self.conf,
            GPUS_PER_NODE='0',
            TASKS=str(tasks),
            CPUS_PER_TASK='1',
            **extra)

    def wait_idle(self, timeout: float = 120) -> None:
        """Wait until no job is queued or running (a test's jobs ended)."""
        deadline = time.monotonic() + timeout
        while self.command('squeue', '-h').strip():
            assert time.monotonic() < deadline, self.command('squeue')
            time.sleep(0.5)


def missing() -> Optional[str]:
    """Why no test cluster can start here (None: it can)."""
    if os.name != 'posix' or os.geteuid() != 0:
        return 'not root'
    for program in ('munged', 'slurmctld', 'slurmd', 'sinfo', 'srun'):
        if not (shutil.which(program) or osp.exists(f'/usr/sbin/{program}')):
            return f'{program} missing'
    return None


def start(folder: str) -> Cluster:
    """Start the cluster in ``folder`` (the node idle at return), its job
    ids from 1000 times the pytest worker's number (the jobs' rendezvous
    ports come from their ids: two workers' clusters must not share them).

    Raises:
        RuntimeError: It did not start; the script's output says why.
    """
    worker = os.environ.get('PYTEST_XDIST_WORKER', 'gw0')[2:]
    first = 1 + 1000 * int(worker) if worker.isdigit() else 1
    proc = subprocess.run(['bash', SCRIPT, 'start', folder],
                          env=dict(os.environ, FIRST_JOB_ID=str(first)),
                          capture_output=True,
                          text=True,
                          timeout=180)
    if proc.returncode:
        raise RuntimeError(f'{SCRIPT} start {folder} failed: '
                           f'{proc.stdout}{proc.stderr}')
    return Cluster(folder, osp.join(folder, 'slurm.conf'))


def stop(cluster: Cluster) -> None:
    """Cancel what is left of its jobs, stop its daemons."""
    subprocess.run(['scancel', '--partition', cluster.partition],
                   env=cluster.env(),
                   capture_output=True,
                   timeout=60)
    subprocess.run(['bash', SCRIPT, 'stop', cluster.folder],
                   capture_output=True,
                   timeout=120)
