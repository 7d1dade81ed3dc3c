"""One report that compares two or more segmentors side by side.

For ``CONFIG CHECKPOINT`` pairs, on each config's test split: clean mIoU
(and per class), the robustness summary on chosen corruptions and
severities, representation collapse per layer, the attention of one query
pixel and the relevance ``m``, and speed and peak memory against each other
at one size. Everything measured is kept under ``<work-dir>/cells/``: rerun
the same command after an interruption and only what is missing is
computed. Outputs (in ``--work-dir``): ``report.md``, ``report.json`` and
the figures. The work is :mod:`mmseg_elliptical.analysis.comparison`. With
``--launcher pytorch`` (``tools/dist_launch.sh
analysis_tools/compare_models.py N ...``) or ``slurm`` the robustness and
collapse sections split the test images across the processes; rank 0
measures the rest and writes the report.

Example (``make report`` after ``make demo`` and ``make demo-dot``)::

    python tools/analysis_tools/compare_models.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --speed-size 64 --work-dir work_dirs/report
"""  # noqa: E501
import argparse
import os
from typing import Dict, Optional, Sequence

from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis.comparison import (DEFAULT_CORRUPTIONS,
                                                  ReportOptions,
                                                  compare_models, report_files)
from mmseg_elliptical.engine import end_process_group, start_launcher
from mmseg_elliptical.transforms import SEVERITIES
from mmseg_elliptical.utils import model_specs


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description='Compare segmentors side by side in one report.')
    p.add_argument(
        'models',
        nargs='+',
        metavar='CONFIG CHECKPOINT',
        help='two or more pairs of config file and checkpoint')
    p.add_argument('--names', nargs='+', help='model names')
    p.add_argument(
        '--corruptions',
        nargs='+',
        default=list(DEFAULT_CORRUPTIONS),
        help='corruption names or groups (all, common, extra); default: '
        f'{" ".join(DEFAULT_CORRUPTIONS)}')
    p.add_argument(
        '--severities',
        nargs='+',
        type=int,
        default=[1, 5],
        help='severities 1-5 (default 1 5)')
    p.add_argument(
        '--max-images', type=int, help='use only the first N test images')
    p.add_argument(
        '--seed', type=int, default=0, help='seed of the corruptions')
    p.add_argument(
        '--part',
        default='backbone',
        choices=['backbone', 'decode_head'],
        help='whose layers the collapse and attention sections show')
    p.add_argument(
        '--image',
        help='image of the attention figure (default: the '
        'first test image)')
    p.add_argument(
        '--point',
        nargs=2,
        type=int,
        metavar=('X', 'Y'),
        help='query pixel (column, row; default: the image centre)')
    p.add_argument(
        '--layers', nargs='+', type=int, help='layers of the attention figure')
    p.add_argument(
        '--heads', nargs='+', type=int, help='heads of the attention figure')
    p.add_argument(
        '--speed-size',
        type=int,
        default=512,
        help='square input size of the speed section')
    p.add_argument('--speed-batch', type=int, default=1)
    p.add_argument('--speed-rounds', type=int, default=10)
    p.add_argument(
        '--baseline',
        '--reference',
        dest='baseline',
        help='the model the others are compared with: corruption errors, '
        'paired tests, speed and memory ratios (default: the last)')
    p.add_argument(
        '--resamples',
        type=int,
        default=1000,
        help='resamples of the paired bootstrap (default 1000)')
    p.add_argument(
        '--bootstrap-seed',
        type=int,
        default=0,
        help='seed of the paired bootstrap (default 0)')
    p.add_argument('--work-dir', default='work_dirs/report')
    p.add_argument('--device', default='cpu')
    p.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    p.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of every config')
    p.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm'],
        default='none',
        help='job launcher, as in tools/test.py')
    p.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = p.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Write the report; return its JSON data."""
    args = parse_args(argv)
    bad = [s for s in args.severities if s not in SEVERITIES]
    if bad:
        raise SystemExit(f'Unknown severities {bad}; valid are 1-5.')
    if args.max_images is not None and args.max_images < 1:
        raise SystemExit(f'--max-images {args.max_images} must be >= 1.')
    options = ReportOptions(
        corruptions=args.corruptions,
        severities=args.severities,
        max_images=args.max_images,
        seed=args.seed,
        part=args.part,
        image=args.image,
        point=args.point,
        layers=args.layers,
        heads=args.heads,
        speed_size=args.speed_size,
        speed_batch=args.speed_batch,
        speed_rounds=args.speed_rounds,
        baseline=args.baseline,
        resamples=args.resamples,
        bootstrap_seed=args.bootstrap_seed,
        cfg_options=args.cfg_options or {},
        device=args.device)
    try:
        specs = model_specs(args.models, args.names)
        if args.resamples < 1:
            raise ValueError(f'--resamples {args.resamples} must be >= 1.')
        options.launch = start_launcher(args.launcher)
        data = compare_models(
            specs, options, args.work_dir, quiet=not args.verbose)
    except ValueError as e:  # includes the stores' GridError
        raise SystemExit(str(e))
    finally:
        end_process_group()
    if data is None:  # not rank 0
        return None
    with open(f'{args.work_dir}/report.md') as f:
        print(f.read())
    print(f'Report in {args.work_dir} ({data["seconds"]} s): ' +
          ', '.join(report_files(args.work_dir)))
    return data


if __name__ == '__main__':
    main()
