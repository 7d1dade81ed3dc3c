"""Representation collapse per layer: mean pairwise cosine of the tokens.

The measure is :mod:`mmseg_elliptical.analysis.collapse`'s: per layer (in
forward order across stages) and model, the mean cosine of pairs of the
layer's grid tokens (cls token, class embeddings left out) averaged over the
forwards of the config's test pipeline (one per image, or per crop in slide
mode), and the spread of the relevance ``m`` of elliptical layers. Outputs
(in ``--out-dir``): ``collapse.json``, ``collapse.md``, ``collapse.csv`` and
``collapse.png``. With ``--launcher pytorch`` (``tools/dist_launch.sh
analysis_tools/collapse.py N ...``) or ``slurm`` the images are split across
the processes and rank 0 writes the results.

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/collapse.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --split val
"""  # noqa: E501
import argparse
import os
from typing import Dict, Optional, Sequence

from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import measure_collapse, write_collapse_report
from mmseg_elliptical.engine import end_process_group, start_launcher
from mmseg_elliptical.utils import model_specs


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='Mean pairwise cosine similarity of patch tokens per '
        'layer (representation collapse), models side by side.')
    parser.add_argument(
        'models',
        nargs='+',
        metavar='CONFIG CHECKPOINT',
        help='pairs of config file and checkpoint')
    parser.add_argument('--names', nargs='+', help='model names')
    parser.add_argument(
        '--split',
        default='test',
        choices=['train', 'val', 'test'],
        help='dataloader of the config to use (default test)')
    parser.add_argument(
        '--part',
        default='backbone',
        choices=['backbone', 'decode_head'],
        help='which transformer to measure')
    parser.add_argument(
        '--max-images', type=int, help='use only the first N images')
    parser.add_argument('--out-dir', default='work_dirs/collapse')
    parser.add_argument('--device', default='cpu')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of every config')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm'],
        default='none',
        help='job launcher, as in tools/test.py')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Measure every model; return ``{name: per-layer results}`` (on rank
    0; None on the other processes)."""
    from mmengine.dist import is_main_process
    args = parse_args(argv)
    try:
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    if args.max_images is not None and args.max_images < 1:
        raise SystemExit(f'--max-images {args.max_images} must be >= 1.')
    start_launcher(args.launcher)
    try:
        results = {}
        for spec in specs:
            if is_main_process():
                print(f'{spec.name}:')
            results[spec.name] = measure_collapse(spec, args.split, args.part,
                                                  args.max_images,
                                                  args.cfg_options,
                                                  args.device)
        if not is_main_process():
            return None
        os.makedirs(args.out_dir, exist_ok=True)
        text = write_collapse_report(results, args.out_dir, args.part)
        print(text)
        print(f'Results in {args.out_dir}/collapse.{{json,md,csv,png}}')
    finally:
        end_process_group()
    return results


if __name__ == '__main__':
    main()
