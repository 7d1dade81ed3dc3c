"""Corruption robustness of one or more segmentors, side by side.

For every corruption and severity, the config's test pipeline gets an
``ImageCorruption`` right after image loading and mmengine's test loop
computes the metric. Each model is built once; each finished cell is saved
to ``<work-dir>/robustness.json`` at once, so a rerun resumes. Outputs (in
``--work-dir``): ``robustness.json``, ``robustness.md``, ``robustness.csv``
and ``robustness.png`` (heatmaps).

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/robustness.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --corruptions gaussian_noise fog \\
        --severities 1 5
"""  # noqa: E501
import argparse
import os
from typing import Dict, Optional, Sequence

from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.transforms import SEVERITIES
from mmseg_elliptical.utils import model_specs


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='mIoU under image corruptions, models side by side.')
    parser.add_argument(
        'models',
        nargs='+',
        metavar='CONFIG CHECKPOINT',
        help='pairs of config file and checkpoint')
    parser.add_argument(
        '--names', nargs='+', help='model names (default: config file names)')
    parser.add_argument(
        '--corruptions',
        nargs='+',
        default=['all'],
        help=f'corruption names, or a group: {", ".join(rb.GROUPS)} '
        '(default all 19)')
    parser.add_argument(
        '--severities',
        nargs='+',
        type=int,
        default=list(SEVERITIES),
        help='severities 1-5 (default all)')
    parser.add_argument(
        '--work-dir',
        default='work_dirs/robustness',
        help='where results (and the resumable JSON) go')
    parser.add_argument(
        '--max-images', type=int, help='evaluate only the first N images')
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the corruptions')
    parser.add_argument(
        '--metric', default='mIoU', help='metric to report (default mIoU)')
    parser.add_argument(
        '--verbose', action='store_true', help='keep the runners\' INFO logs')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of every config, as in tools/test.py')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Run the grid; return the JSON data of the results."""
    args = parse_args(argv)
    bad = [s for s in args.severities if s not in SEVERITIES]
    if bad:
        raise SystemExit(f'Unknown severities {bad}; valid are 1-5.')
    severities = sorted(set(args.severities))
    os.makedirs(args.work_dir, exist_ok=True)
    try:
        corruptions = rb.resolve_corruptions(args.corruptions)
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    try:
        store = rb.run_grid(
            specs,
            corruptions,
            severities,
            args.work_dir,
            args.metric,
            args.seed,
            args.max_images,
            args.cfg_options,
            quiet=not args.verbose)
    except rb.GridError as e:
        raise SystemExit(str(e))
    text = rb.write_robustness_report(store, [s.name for s in specs],
                                      corruptions, severities, args.metric,
                                      args.work_dir)
    print(text)
    print(f'Results in {args.work_dir}/robustness.{{json,md,csv,png}}')
    return store.data


if __name__ == '__main__':
    main()
