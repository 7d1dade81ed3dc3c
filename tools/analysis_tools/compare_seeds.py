"""Train configs on several seeds and compare them (``make compare``).

    python tools/analysis_tools/compare_seeds.py CONFIG [CONFIG ...] \\
        [--names ...] [--seeds 0 1 2] [--work-dir work_dirs/compare] \\
        [--jobs N] [--threads T] [--cfg-options ...] \\
        [--executor local|slurm|debug] [--partition P --time MIN \\
         --gpus-per-run G --tasks-per-run T --cpus-per-task C [--no-wait]]

Every (config, seed) run is mmseg's ``tools/train.py`` in a submitit job
(``mmseg_elliptical/utils/cluster.py``), in its own work dir
``WORK_DIR/NAME/seedSEED``, on the config as resolved here (its bases and
``--cfg-options`` merged, dumped there as ``config.py``) with
``--cfg-options randomness.seed=SEED``. ``--executor local`` (default) runs
the jobs on this machine, ``slurm`` submits each as a Slurm job of
``--gpus-per-run`` GPUs (one task each) or ``--tasks-per-run`` CPU tasks,
training with ``--launcher slurm`` over its tasks (one task: as a local
run), ``debug`` runs them one
after the other in this process. A job's files and log are in the run's
``submitit/`` folder; ``job.json`` there and ``compare.json`` name them.
A finished run leaves ``result.json`` there and is skipped when the command
is run again, unless its settings (config path and resolved content, seed)
changed, which is an error; an interrupted, cancelled or failed one is
resumed from its last checkpoint (``--resume``), and one whose Slurm job is
still queued or running is waited for, not submitted again, and one whose
Slurm job ended with its result while nobody waited (``--no-wait``) is
collected.
``--no-wait`` (Slurm) submits every run's job at once and returns without
waiting: ``WORK_DIR/dependency`` then holds the flag that holds a later
Slurm job until these end well, ``--dependency=afterok:ID:ID:...`` (empty
when no run is left to wait for), for ``SRUN_ARGS`` of the slurm_*.sh
scripts or ``sbatch``; the same command without ``--no-wait`` waits for the
jobs (or collects them) and writes the outputs (docs/evidence.md).
Up to ``--jobs`` runs train at once (default: one per core; on Slurm: all),
each on ``--threads`` torch threads (``OMP_NUM_THREADS`` of its process;
default: the cores shared among the jobs, on Slurm ``--cpus-per-task``);
the configs' datasets are built once here first, so that runs which
generate the same data (the demo's) do not race to write it.

Outputs in ``WORK_DIR``: ``compare.json`` (every run's history),
``compare.md`` (mean and standard deviation of the final metrics per model,
:func:`~mmseg_elliptical.robustness.seeds.runs.seed_statistics`) and
``compare.png`` (validation mIoU over iterations).
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import copy
import hashlib
import json
import os
import os.path as osp
import shutil
import statistics
import subprocess
import sys
import time
from typing import (TYPE_CHECKING, Callable, Dict, List, Optional, Sequence,
                    Tuple)

from mmseg_elliptical.utils import (load_config, markdown_table, pyplot,
                                    write_report)
from mmseg_elliptical.utils.arguments import (CfgOptions, config_file, fail,
                                              non_negative_int, positive_int)
from mmseg_elliptical.utils.choices import EXECUTORS
from mmseg_elliptical.utils.pinned_env import pinned_env

if TYPE_CHECKING:  # the heavy imports come once the arguments passed
    from mmengine.config import Config

    from mmseg_elliptical.utils import cluster

TRAIN = ('from mmseg_elliptical.engine import run_mmseg_tool; '
         'run_mmseg_tool("train.py")')
RESULT = 'result.json'
CONFIG = 'config.py'
JOB = 'job.json'
#: The file of ``--no-wait``'s dependency flag, in the work dir.
DEPENDENCY = 'dependency'
#: The folder of a run's submitit files (pickles, the job's log).
JOB_FOLDER = 'submitit'


class RunError(RuntimeError):
    """A training run that failed, or left no final validation."""


class StaleRunError(ValueError):
    """A run folder that holds another run (config, seed, options)."""


class DataError(ValueError):
    """A config whose datasets cannot be built."""


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any run."""
    parser = argparse.ArgumentParser(
        description='Train configs on several seeds (skipping runs that are '
        'done) and compare their validation metrics: mean and standard '
        'deviation per model, and mIoU over iterations.',
        usage='%(prog)s CONFIG [CONFIG ...] [options]')
    parser.add_argument(
        'configs', nargs='+', type=config_file, help='config files')
    parser.add_argument(
        '--names',
        nargs='+',
        help='one name per config (default: the config file names)')
    parser.add_argument(
        '--seeds',
        nargs='+',
        type=non_negative_int,
        default=[0, 1, 2],
        help='seeds of every config (default: 0 1 2)')
    parser.add_argument(
        '--work-dir',
        default='work_dirs/compare',
        help='root of the runs and of the outputs')
    parser.add_argument(
        '--jobs',
        type=positive_int,
        help='runs trained at once (default: the number of cores, '
        f'{cores()} here; with --executor slurm: all)')
    parser.add_argument(
        '--threads',
        type=positive_int,
        help='torch threads of each run, OMP_NUM_THREADS of its process '
        '(default: the cores divided among the jobs, at least 1)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptions,
        metavar='KEY=VALUE',
        default={},
        help='key=value options of every run, as in tools/train.py')
    jobs_arguments(parser)
    args = parser.parse_args(argv)
    args.names = args.names or [
        osp.splitext(osp.basename(c))[0] for c in args.configs
    ]
    if len(args.names) != len(args.configs):
        parser.error(f'argument --names: {len(args.names)} names for '
                     f'{len(args.configs)} '
                     'configs: give one per config.')
    if len(set(args.names)) != len(args.names):
        parser.error(f'argument --names: {args.names} repeat a name: give '
                     'each config '
                     'its own.')
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f'argument --seeds: {args.seeds} repeat a seed.')
    if args.executor == 'slurm' and not args.partition:
        parser.error('argument --partition: --executor slurm needs the '
                     'partition of the jobs')
    if args.executor == 'slurm' and shutil.which('srun') is None:
        parser.error('argument --executor: slurm submits with sbatch and '
                     'srun, and srun is not on the PATH here: run it on a '
                     'Slurm login node, or use --executor local')
    if args.no_wait and args.executor != 'slurm':
        parser.error('argument --no-wait: only Slurm jobs outlive this '
                     'command: add --executor slurm')
    from mmseg_elliptical.utils import cluster
    args.slurm = cluster.SlurmOptions(
        args.partition, args.time, args.gpus_per_run, args.tasks_per_run,
        args.cpus_per_task,
        args.max_timeouts) if args.executor == 'slurm' else None
    if args.jobs is None:
        args.jobs = cores() if args.executor != 'slurm' else \
            len(args.configs) * len(args.seeds)
    # A Slurm run's threads: its CPUs there, not this machine's cores.
    shared = max(1, cores() // args.jobs)
    args.threads = args.threads or (args.cpus_per_task
                                    if args.executor == 'slurm' else shared)
    return args


def jobs_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of where the runs' jobs run."""
    group = parser.add_argument_group('jobs (submitit)')
    group.add_argument(
        '--executor',
        choices=EXECUTORS,
        default='local',
        help='local: jobs on this machine (default); slurm: Slurm jobs; '
        'debug: one after the other in this process')
    group.add_argument('--partition', help='Slurm partition of the jobs')
    group.add_argument(
        '--time',
        type=positive_int,
        default=24 * 60,
        help="minutes of a run's Slurm job (default: 1440)")
    group.add_argument(
        '--gpus-per-run',
        type=non_negative_int,
        default=0,
        help='GPUs of a Slurm run, one task each (default: 0, CPU tasks)')
    group.add_argument(
        '--tasks-per-run',
        type=positive_int,
        default=1,
        help='tasks of a Slurm run on CPUs (default: 1)')
    group.add_argument(
        '--cpus-per-task',
        type=positive_int,
        default=1,
        help='CPUs of each Slurm task (default: 1)')
    group.add_argument(
        '--max-timeouts',
        type=non_negative_int,
        default=3,
        help='times a Slurm run that reaches its --time is requeued (it '
        'resumes from its last checkpoint; default: 3)')
    group.add_argument(
        '--no-wait',
        action='store_true',
        help='submit every Slurm run at once, write their dependency flag '
        f'(--dependency=afterok:ID:...) to WORK_DIR/{DEPENDENCY} and return; '
        'the command without it waits for (or collects) them and writes '
        'the outputs')


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def fingerprint(cfg: 'Config') -> str:
    """The start of the SHA-256 of a resolved config's text (its bases and
    options merged)."""
    return hashlib.sha256(cfg.pretty_text.encode()).hexdigest()[:16]


def train(config: str,
          seed: int,
          work_dir: str,
          threads: Optional[int] = None,
          launcher: str = 'none') -> float:
    """Run mmseg's ``tools/train.py`` on one seed (resuming if it can); the
    function of a run's job.

    Args:
        config (str): Config file.
        seed (int): ``randomness.seed``.
        work_dir (str): The run's work dir; its ``train.log`` gets the
            output.
        threads (int, optional): torch's threads of the run, with the CPU
            kernels pinned as ``make demo`` pins them
            (:func:`~mmseg_elliptical.utils.pinned_env.pinned_env`; default:
            this process's environment as it is).
        launcher (str): ``--launcher`` (``slurm`` in every task of a Slurm
            job).

    Returns:
        float: Wall-clock seconds.
    """
    os.makedirs(work_dir, exist_ok=True)
    command = [
        sys.executable, '-c', TRAIN, config, '--work-dir', work_dir,
        '--resume', '--launcher', launcher, '--cfg-options',
        f'randomness.seed={seed}'
    ]
    from mmseg_elliptical.utils import cluster
    env = pinned_env(threads=threads) if threads else dict(os.environ)
    out = osp.join(work_dir, 'train.log')
    start = time.perf_counter()
    with open(out, 'a') as f, cluster.warning_signal_blocked():
        proc = subprocess.Popen(
            command, stdout=f, stderr=subprocess.STDOUT, env=env)
    with proc:
        try:
            proc.wait()
        except BaseException:  # submitit ends the task: the run ends too
            proc.kill()
            raise
    if proc.returncode:
        with open(out) as f:
            tail = ''.join(f.readlines()[-20:])
        raise RunError(f'Training {config} with seed {seed} failed '
                       f'(exit status {proc.returncode}); the end of '
                       f'{out}:\n{tail}')
    return time.perf_counter() - start


def prepare_data(config: str, cfg: 'Config') -> None:
    """Build a config's train and validation datasets once, before any run:
    a dataset that generates its files (the demo's) writes them now, and a
    missing data folder is one error here, not one per run.

    Raises:
        DataError: A dataset cannot be built; the message names it.
    """
    from mmengine.registry import init_default_scope
    from mmseg.registry import DATASETS
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    for key in ('train_dataloader', 'val_dataloader'):
        dataset = (cfg.get(key) or {}).get('dataset')
        if dataset is None:
            continue
        try:
            DATASETS.build(copy.deepcopy(dataset))
        except (OSError, ValueError) as e:
            raise DataError(f'{config}: the {key} dataset cannot be built '
                            f'({type(e).__name__}: {e}); no run started.')


def _finished(path: str, settings: Dict) -> Optional[Dict]:
    """The result in ``path`` if the run is done; StaleRunError if it holds
    another run."""
    if not osp.isfile(path):
        return None
    with open(path) as f:
        result = json.load(f)
    found = {k: result.get(k) for k in settings}
    if found != settings:
        raise StaleRunError(
            f'{path} holds a run with {found}, not {settings}: use '
            'another --work-dir, or delete that folder to rerun it.')
    return result


def _finish(cfg: 'Config', settings: Dict, run_dir: str, seconds: float,
            cfg_options: Optional[dict], job: Dict) -> Dict:
    """Check a trained run's history and write its ``result.json``; return
    the result."""
    from mmseg_elliptical.robustness.seeds.runs import read_history
    history = read_history(run_dir)
    last_iter = int(cfg.train_cfg.max_iters)
    if max(history, default=None) != last_iter:
        raise RunError(
            f'{run_dir} holds no validation at the last iteration '
            f'({last_iter}; validated: {sorted(history)}): does the '
            'config validate (val_cfg, val_evaluator) and log with '
            "mmengine's LocalVisBackend? If the run was stopped "
            'during its last validation, delete the folder.')
    result = dict(
        settings,
        cfg_options=dict(cfg_options or {}),
        seconds=round(seconds, 1),
        job=job,
        history={
            str(k): v
            for k, v in sorted(history.items())
        })
    with open(osp.join(run_dir, RESULT), 'w') as f:
        json.dump(result, f, indent=1)
    return result


def _saved_job(run_dir: str) -> Optional[Dict]:
    """The record of the run's last job (``job.json``), if any."""
    path = osp.join(run_dir, JOB_FOLDER, JOB)
    if not osp.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def run_all(configs: Sequence[str],
            names: Sequence[str],
            seeds: Sequence[int],
            work_dir: str,
            cfg_options: Optional[dict] = None,
            log: Callable[[str], None] = print,
            jobs: int = 1,
            threads: Optional[int] = None,
            executor: str = 'local',
            slurm: Optional['cluster.SlurmOptions'] = None,
            wait: bool = True) -> List[Optional[Dict]]:
    """Train what has no ``result.json`` yet, up to ``jobs`` runs at once,
    each as a submitit job (:mod:`mmseg_elliptical.utils.cluster`).

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

    Returns:
        list[dict]: One result per run (configs, then seeds, in order):
        ``name``, ``config``, ``seed``, ``config_sha256``, ``cfg_options``,
        ``seconds``, ``job`` (``executor``, ``id``, ``log``), ``history``;
        None for a run not waited for.
    """
    from mmseg_elliptical.analysis.comparison.plan import Countdown
    from mmseg_elliptical.utils import cluster
    resolved = {c: load_config(c, cfg_options) for c in configs}
    todo = [(c, n, s) for c, n in zip(configs, names) for s in seeds]
    results, pending = [None] * len(todo), []
    for i, (config, name, seed) in enumerate(todo):
        run_dir = osp.join(work_dir, name, f'seed{seed}')
        settings = dict(
            name=name,
            config=osp.abspath(config),
            seed=seed,
            config_sha256=fingerprint(resolved[config]))
        results[i] = _finished(osp.join(run_dir, RESULT), settings)
        if results[i] is not None:
            log(f'[{i + 1}/{len(todo)}] {name} seed {seed}: done before, '
                f'kept ({osp.join(run_dir, RESULT)})')
        else:
            pending.append((i, config, settings, run_dir))
    for config in dict.fromkeys(p[1] for p in pending):
        prepare_data(config, resolved[config])
    countdown = Countdown(training_plan(pending, results, jobs), log)
    if pending:
        countdown.announce('trainings')
    # A job of one task needs no process group: it trains as a local run.
    launcher = 'slurm' if slurm is not None and executor == 'slurm' and \
        slurm.tasks > 1 else 'none'
    records = {}

    def start(i, config, settings, run_dir):
        what = f'[{i + 1}/{len(todo)}] {settings["name"]} seed ' \
            f'{settings["seed"]}'
        folder = osp.join(run_dir, JOB_FOLDER)
        job = cluster.attach(folder, _saved_job(run_dir))
        collected = job is not None and cluster.succeeded(job)
        if collected:
            log(f'{what}: its Slurm job {job.job_id} ended with its result '
                'while nobody waited: collecting it')
        elif job is not None:
            log(f'{what}: its Slurm job {job.job_id} is still queued or '
                'running: waiting for it')
        else:
            os.makedirs(run_dir, exist_ok=True)
            resolved[config].dump(osp.join(run_dir, CONFIG))
            ex = cluster.executor(
                executor,
                folder,
                slurm,
                name=f'{settings["name"]}-seed{settings["seed"]}')
            job = cluster.submit(ex, train, osp.join(run_dir, CONFIG),
                                 settings['seed'], run_dir, threads, launcher)
        records[i] = cluster.record(job, executor)
        os.makedirs(folder, exist_ok=True)
        with open(osp.join(folder, JOB), 'w') as f:
            json.dump(records[i], f, indent=1)
        if not collected:
            log(f'{what}: training as job {job.job_id} (log: '
                f'{osp.join(run_dir, "train.log")}, job log: '
                f'{records[i]["log"]})')
        return job

    def done(k, seconds):
        i, config, settings, run_dir = pending[k]
        result = _finish(resolved[config], settings, run_dir, seconds,
                         cfg_options, records[i])
        last = result['history'][max(result['history'], key=int)]
        log(f'    {settings["name"]} seed {settings["seed"]}: '
            f'{result["seconds"] / 60:.1f} min, final mIoU '
            f'{last.get("mIoU", float("nan")):.2f}')
        results[i] = result
        countdown.done()
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
                  jobs: int) -> List[Tuple[str, float]]:
    """``(run, estimated seconds)`` of each run to train: its model's runs
    trained before (their mean time), else the demo's measured time
    (:data:`~mmseg_elliptical.analysis.comparison.plan.TRAIN_SECONDS`),
    over the runs trained at once."""
    from mmseg_elliptical.analysis.comparison.plan import TRAIN_SECONDS
    at_once = max(1, min(jobs, len(pending)))
    plan = []
    for _, _, settings, _ in pending:
        before = [
            r['seconds'] for r in results
            if r and r['name'] == settings['name'] and r.get('seconds')
        ]
        seconds = statistics.mean(before) if before else TRAIN_SECONDS
        plan.append(
            (f'{settings["name"]} seed {settings["seed"]}', seconds / at_once))
    return plan


def markdown(summary: Dict[str, Dict], results: Sequence[Dict]) -> str:
    """The summary as a markdown table, one row per model.

    Cells are ``mean ± std`` over the seeds; the last column is the mean
    wall-clock time of a run.
    """
    metrics = list(next(iter(summary.values())))
    head = (['model', 'seeds'] + [m.replace('IoU.', '')
                                  for m in metrics] + ['min/run'])
    rows = []
    for name, stats in summary.items():
        seconds = [
            r['seconds'] for r in results
            if r['name'] == name and r.get('seconds')
        ]
        minutes = statistics.mean(seconds) / 60 if seconds else None
        cells = [f'{s["mean"]:.2f} ± {s["std"]:.2f}' for s in stats.values()]
        n = next(iter(stats.values()))['n']
        rows.append([name, n] + cells + [minutes])
    return markdown_table(head, rows, spec='.1f')


def figure(results: Sequence[Dict], metric: str = 'mIoU'):
    """Validation ``metric`` over iterations: every seed, and the mean.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    names = list(dict.fromkeys(r['name'] for r in results))
    for colour, name in zip(plt.rcParams['axes.prop_cycle'].by_key()['color'],
                            names):
        runs = [r['history'] for r in results if r['name'] == name]
        for history in runs:
            steps = sorted(history, key=int)
            ax.plot([int(s) for s in steps],
                    [history[s][metric] for s in steps],
                    color=colour,
                    alpha=0.35,
                    linewidth=1)
        common = sorted(set.intersection(*(set(h) for h in runs)), key=int)
        ax.plot([int(s) for s in common],
                [statistics.mean(h[s][metric] for h in runs) for s in common],
                color=colour,
                linewidth=2,
                marker='o',
                label=f'{name} (mean of {len(runs)})')
    ax.set_xlabel('iteration')
    ax.set_ylabel(f'validation {metric}')
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Train what is missing, write the report; return the summary (with
    ``--no-wait``: submit, write the dependency flag; return {})."""
    args = parse_args(argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.robustness.seeds.runs import seed_statistics
    start = time.perf_counter()
    try:
        results = run_all(
            args.configs,
            args.names,
            args.seeds,
            args.work_dir,
            args.cfg_options,
            log=lambda s: print(s, flush=True),
            jobs=args.jobs,
            threads=args.threads,
            executor=args.executor,
            slurm=args.slurm,
            wait=not args.no_wait)
    except (StaleRunError, DataError) as e:
        fail(str(e))
    except RunError as e:  # the run's own log says why
        raise SystemExit(f'{osp.basename(sys.argv[0])}: {e}')
    if args.no_wait:
        return {}
    seconds = time.perf_counter() - start
    summary = seed_statistics(results)
    table = markdown(summary, results)
    written = write_report(
        args.work_dir,
        'compare',
        data=dict(
            summary=summary,
            runs=results,
            command=dict(
                jobs=args.jobs,
                threads=args.threads,
                executor=args.executor,
                seconds=round(seconds, 1))),
        markdown=table,
        figure=figure(results))
    print(f'\nFinal validation metrics, mean ± standard deviation over '
          f'seeds {" ".join(map(str, args.seeds))} '
          f'({seconds / 60:.1f} min, up to {args.jobs} runs at once, '
          f'{args.threads} thread(s) each):\n\n{table}')
    print('\n'.join(written))
    return summary


if __name__ == '__main__':
    main()
