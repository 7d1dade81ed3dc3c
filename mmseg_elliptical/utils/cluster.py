"""Runs as jobs, here or on a Slurm cluster, through submitit (the
``cluster`` extra): :func:`run_jobs` runs one start per run, ``jobs`` at
once, each ended job its function's value or a :class:`JobError` naming its
log; executors ``local``, ``slurm``, ``debug`` (:func:`executor`). Slurm's
warning signal is submitit's task's alone (docs/reliability.md,
"Multi-GPU and Slurm")."""
import re
import shlex
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import submitit

from .choices import EXECUTORS

#: Slurm states of a job that has ended (``scontrol``'s ``JobState``).
ENDED = ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL',
         'OUT_OF_MEMORY', 'BOOT_FAIL', 'DEADLINE', 'PREEMPTED')
#: Slurm states of a job that will still run (re-attached on a rerun).
WAITING = ('PENDING', 'RUNNING', 'REQUEUED', 'CONFIGURING', 'COMPLETING',
           'RESIZING', 'SUSPENDED', 'REQUEUE_HOLD', 'REQUEUE_FED')
#: Why a job ended without a result, by its state.
WHY = dict(
    TIMEOUT='passed its time limit',
    CANCELLED='was cancelled; run the command again to resume it from its '
    'last checkpoint',
    INTERRUPTED='was interrupted; run the command again to resume it from '
    'its last checkpoint')
#: What a local job may take (submitit's default is 2 minutes).
LOCAL_TIMEOUT_MIN = 60 * 24 * 365
#: Seconds before its time limit at which Slurm signals a job (submitit's
#: default ``--signal=USR2@90``), at most half the limit.
SIGNAL_DELAY_S = 90
#: The signal Slurm sends then (submitit's ``--signal=USR2@...``).
WARNING_SIGNAL = signal.SIGUSR2
#: Seconds a job that left an error may take to end in Slurm's records
#: (Slurm's ``KillWait`` is 30 s by default).
SETTLE_S = 120


class JobError(RuntimeError):
    """A job that failed, was cancelled or passed its time limit."""


@dataclass(frozen=True)
class SlurmOptions:
    """The resources of one run's Slurm job.

    Attributes:
        partition (str): ``--partition``.
        time_min (int): ``--time`` in minutes.
        gpus_per_run (int): GPUs of the job (one task each); 0: CPU tasks.
        tasks_per_run (int): Tasks of a CPU job (with GPUs: one per GPU).
        cpus_per_task (int): ``--cpus-per-task``.
        max_timeouts (int): Time-outs after which a job is not requeued
            again (submitit's ``max_num_timeout``).
    """
    partition: str
    time_min: int = 60
    gpus_per_run: int = 0
    tasks_per_run: int = 1
    cpus_per_task: int = 1
    max_timeouts: int = 3

    @property
    def tasks(self) -> int:
        """Tasks of the job: one per GPU, else ``tasks_per_run``."""
        return self.gpus_per_run or self.tasks_per_run


def executor(kind: str,
             folder: str,
             slurm: Optional[SlurmOptions] = None,
             name: str = 'run') -> submitit.Executor:
    """The submitit executor of one run, its files (pickles, logs) in
    ``folder``.

    Args:
        kind (str): One of :data:`EXECUTORS`.
        folder (str): The job's folder.
        slurm (SlurmOptions, optional): Needed for ``'slurm'``.
        name (str): The Slurm job's name.
    """
    if kind == 'debug':
        return submitit.DebugExecutor(folder)
    if kind == 'local':
        ex = submitit.LocalExecutor(folder)
        ex.update_parameters(
            timeout_min=LOCAL_TIMEOUT_MIN, stderr_to_stdout=True)
        return ex
    if kind != 'slurm' or slurm is None:
        raise ValueError(f'executor {kind!r} (one of {EXECUTORS}; slurm '
                         'needs SlurmOptions)')
    ex = submitit.SlurmExecutor(
        folder, max_num_timeout=slurm.max_timeouts, python=task_python())
    gpus = dict(gpus_per_node=slurm.gpus_per_run) if slurm.gpus_per_run \
        else {}
    ex.update_parameters(
        job_name=name,
        partition=slurm.partition,
        time=slurm.time_min,
        signal_delay_s=signal_delay(slurm.time_min),
        nodes=1,
        ntasks_per_node=slurm.tasks,
        cpus_per_task=slurm.cpus_per_task,
        stderr_to_stdout=True,
        **gpus)
    return ex


def signal_delay(time_min: int) -> int:
    """Seconds before the time limit at which Slurm signals the job:
    :data:`SIGNAL_DELAY_S`, at most half of ``time_min``. A delay longer
    than the limit would signal the job as it starts, before submitit
    listens, and the signal would kill it without a result."""
    return min(SIGNAL_DELAY_S, time_min * 30)


def task_python() -> str:
    """The command that starts a Slurm task's Python (this interpreter):
    under ``sh``, which ignores :data:`WARNING_SIGNAL` and execs it, so a
    warning that comes while the task still loads its function is lost
    rather than fatal; submitit's handler replaces the ignore once it is
    installed. Such a job runs on to its time limit and ends ``TIMEOUT``."""
    name = WARNING_SIGNAL.name[len('SIG'):]
    return (f'sh -c \'trap "" {name}; exec "$0" "$@"\' '
            f'{shlex.quote(sys.executable)}')


@contextmanager
def warning_signal_blocked() -> Iterator[None]:
    """Start a job's child processes in this block: they inherit
    :data:`WARNING_SIGNAL` blocked, so Slurm's warning reaches only
    submitit's task, which requeues the job or lets it end at its time limit
    (a child killed by it would end the job as a failed run). A warning
    that comes meanwhile reaches this process as the block ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {WARNING_SIGNAL})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Resumable(submitit.helpers.Checkpointable):
    """A job's function that Slurm may stop and requeue: signalled before
    its time limit or preemption, submitit requeues the same call (up to
    the executor's ``max_num_timeout`` time-outs), which resumes from the
    last checkpoint (the function's own ``--resume``).

    Args:
        fn (callable): The function.
    """

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def submit(ex: submitit.Executor, fn: Callable, *args: Any) -> submitit.Job:
    """``ex.submit(Resumable(fn), *args)``: ``fn`` travels by reference, so
    a job's interpreter must import it by name (a package module's)."""
    return ex.submit(Resumable(fn), *args)


def log_path(job: submitit.Job) -> str:
    """The job's log (its task 0's output; stderr goes there too)."""
    return str(job.paths.stdout).replace('%t', '0')


def record(job: submitit.Job, kind: str) -> Dict[str, str]:
    """What ``compare.json`` keeps of a job: executor, id, log."""
    return dict(executor=kind, id=str(job.job_id), log=log_path(job))


def slurm_state(job_id: str) -> Optional[str]:
    """The ``JobState`` that ``scontrol`` shows (None: no such job, or
    none known any more)."""
    try:
        out = subprocess.run(['scontrol', 'show', 'job', '-o', job_id],
                             capture_output=True,
                             text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'JobState=(\S+)', out)
    return found.group(1) if found else None


def state(job: submitit.Job, force: bool = False) -> str:
    """The job's state: Slurm's (``scontrol`` where ``sacct`` knows none;
    ``force``: asked now, not submitit's cached answer), or a local job's."""
    if isinstance(job, submitit.SlurmJob):
        known = job.watcher.get_state(
            str(job.job_id), mode='force' if force else 'standard')
        if known.upper() == 'UNKNOWN':
            known = slurm_state(str(job.job_id)) or 'UNKNOWN'
        return known.split()[0].upper()
    if isinstance(job, submitit.DebugJob):  # its done() runs it, under pdb
        return 'FINISHED' if job.submission().done() else 'PENDING'
    return str(job.state).upper()


def settled_state(job: submitit.Job,
                  wait_s: float = SETTLE_S,
                  poll_s: float = 1.0) -> str:
    """The state of a Slurm job once Slurm has ended it (at most ``wait_s``
    seconds on). A task writes its result before Slurm records the job's
    end: at the time limit Slurm terminates the training child, the task
    (which bypasses the signal) leaves that error, and the job shows
    ``RUNNING`` or ``COMPLETING`` for a while before ``TIMEOUT``."""
    now = state(job)
    deadline = time.monotonic() + wait_s
    while isinstance(job, submitit.SlurmJob) and now in WAITING \
            and time.monotonic() < deadline:
        time.sleep(poll_s)
        now = state(job, force=True)
    return now


def ended(job: submitit.Job) -> bool:
    """Whether the job has ended (a debug job runs when it is asked for)."""
    if isinstance(job, submitit.DebugJob) or job.paths.result_pickle.exists():
        return True
    if isinstance(job, submitit.SlurmJob):
        return state(job) in ENDED or job.done()
    return job.done()


def outcome(job: submitit.Job, what: str) -> Any:
    """The return value of an ended job's task 0.

    Raises:
        JobError: The job failed (its error and log), was cancelled, or
            passed its time limit: one line naming its log.
    """
    if not isinstance(job, submitit.DebugJob) and \
            not job.paths.result_pickle.exists():
        now = state(job)
        if now != 'COMPLETED':  # a finished job's result may lag behind
            why = WHY.get(now, f'ended ({now}) without a result')
            raise JobError(f'{what}: job {job.job_id} {why}; its log: '
                           f'{log_path(job)}')
    try:
        if isinstance(job, submitit.DebugJob):  # in here, without pdb
            return job.submission().result()
        return job.results()[0]
    except Exception as e:  # noqa: BLE001  # the job's error, with its log
        if 'timed-out' in str(e) or settled_state(job) == 'TIMEOUT':
            raise JobError(f'{what}: job {job.job_id} {WHY["TIMEOUT"]}; its '
                           f'log: {log_path(job)}') from None
        raise JobError(f'{what}: job {job.job_id} failed; its log: '
                       f'{log_path(job)}\n{e}') from e


def succeeded(job: submitit.Job) -> bool:
    """Whether the job's task 0 left its function's return value (not an
    error)."""
    path = job.paths.result_pickle
    if not path.exists():
        return False
    try:
        return submitit.core.utils.pickle_load(path)[0] == 'success'
    except Exception:  # noqa: BLE001  # cut short or unreadable: no result
        return False


def attach(folder: str, saved: Optional[Dict]) -> Optional[submitit.Job]:
    """The Slurm job of a saved :func:`record` that is still queued or
    running (a rerun waits for it rather than submitting a second), or that
    ended with its function's result while nobody waited for it (a rerun
    collects that result)."""
    if not saved or saved.get('executor') != 'slurm':
        return None
    job = submitit.SlurmJob(folder, saved['id'])
    if succeeded(job) or slurm_state(saved['id']) in WAITING:
        return job
    return None


def dependency(jobs: Sequence[submitit.Job]) -> str:
    """The ``srun`` / ``sbatch`` flag that holds a job until these jobs have
    ended well: ``--dependency=afterok:ID:ID:...`` of those that have not
    left their result yet ('' when none is left to wait for)."""
    ids = [str(job.job_id) for job in jobs if not succeeded(job)]
    return f'--dependency=afterok:{":".join(ids)}' if ids else ''


def run_jobs(starts: Sequence[Callable[[], submitit.Job]],
             jobs: int,
             done: Callable[[int, Any], Any],
             names: Optional[Sequence[str]] = None,
             poll_s: float = 0.5) -> List[Any]:
    """Start the jobs, up to ``jobs`` at once, in order; wait for them.

    A failed job (or a ``done`` that raises) stops the starts not made yet;
    the jobs already started end first (and are kept), then the first
    error is raised.

    Args:
        starts (Sequence[callable]): One per run: submits its job and
            returns it.
        jobs (int): Jobs at once.
        done (callable): ``done(index, value)`` of each ended job (its
            function's return value); what it returns is the run's result.
        names (Sequence[str], optional): The runs' names in errors
            (default: ``run 1``, ``run 2``, ...).
        poll_s (float): Seconds between looks at the running jobs.

    Returns:
        list: ``done``'s results, in the order of ``starts``.
    """
    results: List[Any] = [None] * len(starts)
    queue, running, errors = list(range(len(starts))), {}, []
    while queue or running:
        while queue and len(running) < max(1, jobs) and not errors:
            i = queue.pop(0)
            running[i] = starts[i]()
        over = [i for i, job in running.items() if ended(job)]
        if not over:
            time.sleep(poll_s)
            continue
        for i in over:
            job = running.pop(i)
            try:
                what = names[i] if names else f'run {i + 1}'
                results[i] = done(i, outcome(job, what))
            except Exception as e:  # noqa: BLE001  # raised below
                errors.append(e)
        if errors:
            queue.clear()
    if errors:
        raise errors[0]
    return results
