"""Train configs on several seeds and compare them (``make compare``).

    python tools/analysis_tools/compare_seeds.py CONFIG [CONFIG ...] \\
        [--names ...] [--seeds 0 1 2] [--work-dir work_dirs/compare] \\
        [--jobs N] [--threads T] [--cfg-options ...] \\
        [--executor local|slurm|debug] [--partition P --time MIN \\
         --gpus-per-run G --tasks-per-run T --cpus-per-task C [--no-wait]]

Every (config, seed) run is mmseg's ``tools/train.py`` with
``randomness.seed=SEED`` on the config as resolved here, a submitit job in
``WORK_DIR/NAME/seedSEED`` (:mod:`mmseg_elliptical.robustness.seeds.compare`;
docs/demo.md, "make compare"; docs/reliability.md, "Several runs as jobs"):
a finished run is kept, a cut one resumed, a Slurm job still queued or
running (or ended while nobody waited, ``--no-wait``) waited for or
collected. Outputs in ``WORK_DIR``: ``compare.json`` (every run's history),
``compare.md`` (mean and standard deviation of the final metrics per model),
``compare.png`` (validation mIoU over iterations); with ``--no-wait``,
``dependency`` (the flag that holds a later Slurm job until these end well).
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import functools
import os
import os.path as osp
import shutil
import sys
import time
from typing import Dict, Optional, Sequence

from mmseg_elliptical.robustness.seeds.layout import DEPENDENCY
from mmseg_elliptical.utils.arguments import (CfgOptions, config_file, fail,
                                              non_negative_int, positive_int)
from mmseg_elliptical.utils.choices import EXECUTORS


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
                     f'{len(args.configs)} configs: give one per config.')
    if len(set(args.names)) != len(args.names):
        parser.error(f'argument --names: {args.names} repeat a name: give '
                     'each config its own.')
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
    for flag, kind, default, text in (
        ('--time', positive_int, 24 * 60,
         "minutes of a run's Slurm job (default: 1440)"),
        ('--gpus-per-run', non_negative_int, 0,
         'GPUs of a Slurm run, one task each (default: 0, CPU tasks)'),
        ('--tasks-per-run', positive_int, 1,
         'tasks of a Slurm run on CPUs (default: 1)'),
        ('--cpus-per-task', positive_int, 1,
         'CPUs of each Slurm task (default: 1)'),
        ('--max-timeouts', non_negative_int, 3,
         'times a Slurm run that reaches its --time is requeued (it '
         'resumes from its last checkpoint; default: 3)'),
    ):
        group.add_argument(flag, type=kind, default=default, help=text)
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


def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict[str, Dict]]:
    """Train what is missing, write the report; return the summary (with
    ``--no-wait``: submit, write the dependency flag; return {};
    ``check_only``: stop after the checks, ``tools/check_args.py``)."""
    args = parse_args(argv)
    if check_only:
        return None
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.analysis.comparison import plan
    from mmseg_elliptical.robustness.seeds import compare, runs, training
    from mmseg_elliptical.utils import cluster  # the cluster extra
    slurm = cluster.SlurmOptions(
        args.partition, args.time, args.gpus_per_run, args.tasks_per_run,
        args.cpus_per_task,
        args.max_timeouts) if args.executor == 'slurm' else None
    log = functools.partial(print, flush=True)
    start = time.perf_counter()
    try:
        results = compare.run_all(
            args.configs,
            args.names,
            args.seeds,
            args.work_dir,
            args.cfg_options,
            log=log,
            jobs=args.jobs,
            threads=args.threads,
            executor=args.executor,
            slurm=slurm,
            wait=not args.no_wait,
            countdown=lambda steps: plan.Countdown(steps, log),
            train_seconds=plan.TRAIN_SECONDS)
    except (training.StaleRunError, training.DataError) as e:
        fail(str(e))
    except training.RunError as e:  # the run's own log says why
        raise SystemExit(f'{osp.basename(sys.argv[0])}: {e}')
    if args.no_wait:
        return {}
    seconds = time.perf_counter() - start
    command = dict(
        jobs=args.jobs,
        threads=args.threads,
        executor=args.executor,
        seconds=round(seconds, 1))
    summary, table, written = runs.write_compare(args.work_dir, results,
                                                 command)
    print(f'\nFinal validation metrics, mean ± standard deviation over '
          f'seeds {" ".join(map(str, args.seeds))} '
          f'({seconds / 60:.1f} min, up to {args.jobs} runs at once, '
          f'{args.threads} thread(s) each):\n\n{table}')
    print('\n'.join(written))
    return summary


if __name__ == '__main__':
    main()
