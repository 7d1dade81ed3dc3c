"""Corruption robustness of one or more segmentors, side by side.

For every corruption and severity, the config's test pipeline gets an
``ImageCorruption`` right after image loading and mmengine's test loop
computes the metric. Each model is built once; each finished cell is saved
to ``<work-dir>/robustness.json`` at once, so a rerun resumes. With
``--launcher pytorch`` (``tools/dist_robustness.sh``) or ``slurm``
(``tools/slurm_robustness.sh``) every cell's images are split across the
processes and rank 0 writes the results. The report gives P, mPC, rPC and,
against ``--baseline``, CE, mCE and rmCE, and a paired bootstrap of the mIoU
difference. Outputs (in ``--work-dir``): ``robustness.json``,
``robustness.md``, ``robustness.csv``, ``robustness_summary.csv``,
``robustness.png`` and ``areas/`` (per-image areas of every cell).

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/robustness.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --baseline dot-product \\
        --corruptions gaussian_noise fog --severities 1 5
"""  # noqa: E501
import argparse
import os
from typing import Dict, Optional, Sequence

from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.engine import end_process_group, start_launcher
from mmseg_elliptical.utils import model_specs


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    protocols = '; '.join(f'{k}: {p.description} ({p.passes} test passes '
                          'per model)' for k, p in rb.PROTOCOLS.items())
    parser = argparse.ArgumentParser(
        description='Segmentors under image corruptions, side by side.')
    parser.add_argument(
        'models',
        nargs='+',
        metavar='CONFIG CHECKPOINT',
        help='pairs of config file and checkpoint')
    parser.add_argument(
        '--names', nargs='+', help='model names (default: config file names)')
    parser.add_argument(
        '--protocol',
        choices=list(rb.PROTOCOLS),
        help=f'a preset of corruptions, severities and metrics: {protocols}.'
        ' Default: default, unless --corruptions or --severities are given')
    parser.add_argument(
        '--corruptions',
        nargs='+',
        help='corruption names, or sets: '
        f'{", ".join(rb.CORRUPTION_SETS)} (default: the protocol\'s)')
    parser.add_argument(
        '--severities',
        nargs='+',
        type=int,
        help='severities 1-5 (default: the protocol\'s)')
    parser.add_argument(
        '--baseline',
        help='the model CE and mCE divide by and the paired test compares '
        'with, normally the dot-product twin (default: the last model)')
    parser.add_argument(
        '--work-dir',
        default='work_dirs/robustness',
        help='where results (and the resumable JSON) go')
    parser.add_argument(
        '--max-images', type=int, help='evaluate only the first N images')
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the corruptions')
    parser.add_argument(
        '--metric',
        help='metric of P, mPC and mCE (default: the protocol\'s, mIoU)')
    parser.add_argument(
        '--resamples',
        type=int,
        default=1000,
        help='resamples of the paired bootstrap (default 1000)')
    parser.add_argument(
        '--bootstrap-seed',
        type=int,
        default=0,
        help='seed of the paired bootstrap (default 0)')
    parser.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of every config, as in tools/test.py')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm'],
        default='none',
        help='job launcher, as in tools/test.py')
    # torch.distributed.launch passes --local-rank (torchrun: LOCAL_RANK).
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if args.protocol and (args.corruptions or args.severities):
        parser.error(f'--protocol {args.protocol} sets the corruptions and '
                     'severities: drop --corruptions / --severities, or the '
                     'protocol.')
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Run the grid; return the JSON data of the results."""
    from mmengine.dist import is_main_process
    args = parse_args(argv)
    protocol = rb.PROTOCOLS[args.protocol or 'default']
    metric = args.metric or protocol.metrics[0]
    try:
        corruptions = rb.resolve_corruptions(args.corruptions
                                             or protocol.corruptions)
        severities = rb.resolve_severities(args.severities
                                           or protocol.severities)
        specs = model_specs(args.models, args.names)
        names = [s.name for s in specs]
        baseline = args.baseline or (names[-1] if len(names) > 1 else None)
        if baseline not in names + [None]:
            raise rb.GridError(f'--baseline {baseline!r} is none of the '
                               f'models {names} (see --names).')
        if args.max_images is not None and args.max_images < 1:
            raise rb.GridError(f'--max-images {args.max_images} must be '
                               '>= 1.')
        if args.resamples < 1:
            raise rb.GridError(f'--resamples {args.resamples} must be >= 1.')
    except ValueError as e:  # GridError, and model_specs' errors
        raise SystemExit(str(e))
    launch = start_launcher(args.launcher)
    try:
        store = rb.run_grid(
            specs,
            corruptions,
            severities,
            args.work_dir,
            metric,
            args.seed,
            args.max_images,
            args.cfg_options,
            quiet=not args.verbose,
            launch_options=launch)
        if is_main_process():
            means = protocol.metrics if len(protocol.metrics) > 1 else ()
            text = rb.write_robustness_report(store, names, corruptions,
                                              severities, metric,
                                              args.work_dir, baseline, means,
                                              args.resamples,
                                              args.bootstrap_seed)
            print(text)
            print(f'Results in {args.work_dir}/robustness.{{json,md,csv,png}}')
    except rb.GridError as e:
        raise SystemExit(str(e))
    finally:
        end_process_group()
    return store.data


if __name__ == '__main__':
    main()
