"""Where one query patch attends, in chosen layers and heads, per model.

Runs each model on one image (mmseg's ``inference_model``, whole-image
mode) with its attentions on their explicit path, records the attention
probabilities of the patch under the query pixel, and draws them over the
image (mmseg's own dot-product models are converted in place to their
elliptical version in dot-product mode, which computes the same):
one row per model, one column per (layer, head). For models with elliptical
attention it also plots the relevance ``m`` of every elliptical layer
(heads x head coordinates).

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/attention_maps.py \\
        data/demo_shapes/images/validation/demo_00002.jpg \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --point 28 48 --layers 1 3 5
"""  # noqa: E501
import argparse
import os.path as osp
from typing import Dict, Optional, Sequence

import cv2
from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import (model_attention, plot_attention,
                                       plot_relevance)
from mmseg_elliptical.utils import model_specs


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='Attention of one query patch over the image, models '
        'side by side, and the relevance m of elliptical layers.')
    parser.add_argument('image', help='image file')
    parser.add_argument(
        'models',
        nargs='+',
        metavar='CONFIG CHECKPOINT',
        help='pairs of config file and checkpoint')
    parser.add_argument(
        '--point',
        nargs=2,
        type=int,
        required=True,
        metavar=('X', 'Y'),
        help='query pixel (column, row) in the image')
    parser.add_argument(
        '--layers',
        nargs='+',
        type=int,
        help='layers to show (default: 1, middle, last)')
    parser.add_argument(
        '--heads', nargs='+', type=int, help='heads to show (default: all)')
    parser.add_argument(
        '--mean-heads',
        action='store_true',
        help='add a column with the mean over heads')
    parser.add_argument(
        '--part', default='backbone', choices=['backbone', 'decode_head'])
    parser.add_argument('--names', nargs='+', help='model names')
    parser.add_argument(
        '--out',
        default='work_dirs/attention/attention.png',
        help='attention figure')
    parser.add_argument(
        '--relevance-out',
        default=None,
        help='m figure (default: <out stem>_relevance.png next to --out)')
    parser.add_argument('--device', default='cpu')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of every config')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Draw the figures; return the per-model results."""
    args = parse_args(argv)
    if not osp.isfile(args.image):
        raise SystemExit(f'image {args.image} does not exist.')
    try:
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    try:
        results = {
            s.name:
            model_attention(s, args.image, args.point, args.layers, args.part,
                            args.cfg_options, args.device)
            for s in specs
        }
    except ValueError as e:
        raise SystemExit(str(e))
    layers = sorted(
        set.intersection(*(set(r['maps']) for r in results.values())))
    num_heads = min(r['num_heads'] for r in results.values())
    heads = args.heads if args.heads else list(range(num_heads))
    bad = [hd for hd in heads if not 0 <= hd < num_heads]
    if bad:
        raise SystemExit(f'--heads {bad} out of range; the models have '
                         f'heads 0..{num_heads - 1}.')
    image = cv2.cvtColor(cv2.imread(args.image), cv2.COLOR_BGR2RGB)
    plot_attention(image, results, args.point, layers, heads, args.mean_heads,
                   args.out)
    print(f'Attention maps in {args.out}')
    rel_out = args.relevance_out or \
        f'{osp.splitext(args.out)[0]}_relevance.png'
    if plot_relevance(results, rel_out, args.part):
        print(f'Relevance m in {rel_out}')
    else:
        print('No model has elliptical layers: no relevance plot.')
    return results


if __name__ == '__main__':
    main()
