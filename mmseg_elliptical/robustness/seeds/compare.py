"""The runs of compare_seeds.py: each (config, seed) trained once, as a
submitit job (:mod:`mmseg_elliptical.utils.cluster`) of
:func:`.training.train`, in its folder (:mod:`.layout`)."""
import os
import os.path as osp
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...utils import cluster, load_config
from .layout import CONFIG, DEPENDENCY, JOB_FOLDER, RESULT, TRAIN_LOG, run_dir
from .training import (RunError, fingerprint, finish, finished, prepare_data,
                       save_job, saved_job, train)

#: ``countdown(plan)`` of ``[(run, estimated seconds)]`` gives what prints
#: the plan (``announce(what)``) and each run's end (``done()``).
Countdown = Callable[[List[Tuple[str, float]]], Any]


def run_all(configs: Sequence[str],
            names: Sequence[str],
            seeds: Sequence[int],
            work_dir: str,
            cfg_options: Optional[dict] = None,
            log: Callable[[str], None] = print,
            jobs: int = 1,
            threads: Optional[int] = None,
            executor: str = 'local',
            slurm: Optional[cluster.SlurmOptions] = None,
            wait: bool = True,
            countdown: Optional[Countdown] = None,
            train_seconds: float = 0.) -> List[Optional[Dict]]:
    """Train what has no ``result.json`` yet, up to ``jobs`` runs at once.

    Every finished run's settings are checked before any training starts.
    A failed run stops the runs not started yet; those already training
    finish (and are kept), then its error is raised.

    Args:
        configs (Sequence[str]): Config files.
        names (Sequence[str]): One name per config (folder and label).
        seeds (Sequence[int]): Seeds of every config.
        work_dir (str): Root of the runs.
        cfg_options (dict, optional): Options of every run, as
            ``DictAction`` parses them.
        log (callable): Progress printer.
        jobs (int): Runs trained at once.
        threads (int, optional): ``OMP_NUM_THREADS`` of each run.
        executor (str): ``'local'``, ``'slurm'`` or ``'debug'``.
        slurm (SlurmOptions, optional): The resources of a Slurm run.
        wait (bool): False: start every run's job at once, write their
            :func:`~mmseg_elliptical.utils.cluster.dependency` flag to
            ``WORK_DIR/dependency`` and return without waiting (Slurm).
        countdown (callable, optional): The progress of the runs to train
            (:data:`Countdown`; default: none).
        train_seconds (float): The estimate of a run whose model has no run
            trained before (:func:`training_plan`).

    Returns:
        list[dict]: One result per run (configs, then seeds, in order):
        ``name``, ``config``, ``seed``, ``config_sha256``, ``cfg_options``,
        ``seconds``, ``job`` (``executor``, ``id``, ``log``), ``history``;
        None for a run not waited for.
    """
    resolved = {c: load_config(c, cfg_options) for c in configs}
    todo = [(c, n, s) for c, n in zip(configs, names) for s in seeds]
    results, pending = [None] * len(todo), []
    for i, (config, name, seed) in enumerate(todo):
        folder = run_dir(work_dir, name, seed)
        settings = dict(
            name=name,
            config=osp.abspath(config),
            seed=seed,
            config_sha256=fingerprint(resolved[config]))
        results[i] = finished(folder, settings)
        if results[i] is not None:
            log(f'[{i + 1}/{len(todo)}] {name} seed {seed}: done before, '
                f'kept ({osp.join(folder, RESULT)})')
        else:
            pending.append((i, config, settings, folder))
    for config in dict.fromkeys(p[1] for p in pending):
        prepare_data(config, resolved[config])
    progress = None if countdown is None else countdown(
        training_plan(pending, results, jobs, train_seconds))
    if pending and progress is not None:
        progress.announce('trainings')
    # A job of one task needs no process group: it trains as a local run.
    launcher = 'slurm' if slurm is not None and executor == 'slurm' and \
        slurm.tasks > 1 else 'none'
    records = {}

    def start(i, config, settings, folder):
        what = f'[{i + 1}/{len(todo)}] {settings["name"]} seed ' \
            f'{settings["seed"]}'
        job_folder = osp.join(folder, JOB_FOLDER)
        job = cluster.attach(job_folder, saved_job(folder))
        collected = job is not None and cluster.succeeded(job)
        if collected:
            log(f'{what}: its Slurm job {job.job_id} ended with its result '
                'while nobody waited: collecting it')
        elif job is not None:
            log(f'{what}: its Slurm job {job.job_id} is still queued or '
                'running: waiting for it')
        else:
            os.makedirs(folder, exist_ok=True)
            resolved[config].dump(osp.join(folder, CONFIG))
            ex = cluster.executor(
                executor,
                job_folder,
                slurm,
                name=f'{settings["name"]}-seed{settings["seed"]}')
            job = cluster.submit(ex, train, osp.join(folder, CONFIG),
                                 settings['seed'], folder, threads, launcher)
        records[i] = cluster.record(job, executor)
        save_job(folder, records[i])
        if not collected:
            log(f'{what}: training as job {job.job_id} (log: '
                f'{osp.join(folder, TRAIN_LOG)}, job log: '
                f'{records[i]["log"]})')
        return job

    def done(k, seconds):
        i, config, settings, folder = pending[k]
        result = finish(resolved[config], settings, folder, seconds,
                        cfg_options, records[i])
        last = result['history'][max(result['history'], key=int)]
        log(f'    {settings["name"]} seed {settings["seed"]}: '
            f'{result["seconds"] / 60:.1f} min, final mIoU '
            f'{last.get("mIoU", float("nan")):.2f}')
        results[i] = result
        if progress is not None:
            progress.done()
        return result

    if not wait:
        flag = cluster.dependency([start(*p) for p in pending])
        os.makedirs(work_dir, exist_ok=True)
        with open(osp.join(work_dir, DEPENDENCY), 'w') as f:
            f.write(flag + '\n')
        log(f'Submitted; {osp.join(work_dir, DEPENDENCY)}: '
            f'{flag or "(no job left to wait for)"}')
        return results
    starts = [lambda p=p: start(*p) for p in pending]
    try:
        cluster.run_jobs(
            starts,
            jobs,
            done,
            names=[f'{p[2]["name"]} seed {p[2]["seed"]}' for p in pending],
            poll_s=2.0 if executor == 'slurm' else 0.2)
    except cluster.JobError as e:
        raise RunError(str(e)) from None
    return results


def training_plan(pending: Sequence[tuple], results: Sequence[Optional[Dict]],
                  jobs: int, train_seconds: float) -> List[Tuple[str, float]]:
    """``(run, estimated seconds)`` of each run to train: its model's runs
    trained before (their mean time), else ``train_seconds``, over the runs
    trained at once."""
    at_once = max(1, min(jobs, len(pending)))
    plan = []
    for _, _, settings, _ in pending:
        before = [
            r['seconds'] for r in results
            if r and r['name'] == settings['name'] and r.get('seconds')
        ]
        seconds = statistics.mean(before) if before else train_seconds
        plan.append(
            (f'{settings["name"]} seed {settings["seed"]}', seconds / at_once))
    return plan
