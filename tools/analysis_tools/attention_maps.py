"""Where one query pixel's token attends, in chosen layers and heads, per model.

Runs each model once on one image (the config's test pipeline; in slide mode
on the first crop that holds the query) with the chosen layers' attentions
on their explicit path, and draws the probabilities of the token under the
query pixel over the image: global attention over the patch grid (ViT,
BEiT, MAE), the spatially reduced keys upsampled (MiT, Twins), the query's
window in its place (Swin); one row per model, one column per (layer,
head). mmseg's own dot-product models are converted in place to their
elliptical version in dot-product mode, which computes the same. For models
with elliptical attention it also plots the relevance ``m`` of every
elliptical layer (heads x head coordinates). The work is
:mod:`mmseg_elliptical.analysis.attention_maps`.

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/attention_maps.py \\
        data/demo_shapes/images/validation/demo_00002.jpg \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --point 28 48 --layers 1 3 5
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
from typing import Dict, Optional, Sequence

import cv2

from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, add_models,
                                              add_work_dir, device, models_of,
                                              non_negative_int, tool_main)
from mmseg_elliptical.utils.choices import PARTS
from mmseg_elliptical.utils.images import image_file


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work: the files, the
    point inside the image (adds ``specs``)."""
    parser = argparse.ArgumentParser(
        description='Attention of one query patch over the image, models '
        'side by side, and the relevance m of elliptical layers.',
        usage='%(prog)s IMAGE CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] '
        '--point X Y [options]')
    parser.add_argument('image', type=image_file, help='image file')
    add_models(parser)
    parser.add_argument(
        '--point',
        nargs=2,
        type=non_negative_int,
        required=True,
        metavar=('X', 'Y'),
        help='query pixel (column, row) in the image')
    parser.add_argument(
        '--layers',
        nargs='+',
        type=non_negative_int,
        help='layers to show, global indices in forward order across stages '
        '(default: 1, middle, last)')
    parser.add_argument(
        '--heads',
        nargs='+',
        type=non_negative_int,
        help='heads to show (default: the first 4)')
    parser.add_argument(
        '--mean-heads',
        action='store_true',
        help='add a column with the mean over heads')
    parser.add_argument('--part', default='backbone', choices=PARTS)
    add_work_dir(parser, 'work_dirs/attention', old=())
    parser.add_argument(
        '--out',
        help='attention figure (default: attention.png in --work-dir)')
    parser.add_argument(
        '--relevance-out',
        default=None,
        help='m figure (default: <out stem>_relevance.png next to --out)')
    parser.add_argument('--device', type=device, default='cpu')
    add_cfg_options(parser)
    add_allow_partial(parser)
    args = parser.parse_args(argv)
    height, width = cv2.imread(args.image).shape[:2]
    x, y = args.point
    if x >= width or y >= height:
        parser.error(f'argument --point: ({x}, {y}) lies outside the '
                     f'{width} x {height} image {args.image} (x is the '
                     f'column, 0..{width - 1}; y the row, 0..{height - 1}).')
    args.specs = models_of(parser, args)
    args.parser = parser  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict[str, Dict]]:
    """Draw the figures; return the per-model results."""
    args = parse_args(argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.analysis import (model_attention, plot_attention,
                                           plot_relevance, shown_heads,
                                           shown_layers)
    from mmseg_elliptical.engine import checked_models
    args.notes = checked_models(args)
    if check_only:
        return None
    args.out = args.out or osp.join(args.work_dir, 'attention.png')
    results = {
        s.name:
        model_attention(s, args.image, args.point, args.layers, args.part,
                        args.cfg_options, args.device)
        for s in args.specs
    }
    layers = shown_layers(results)
    heads = shown_heads(results, layers, args.heads)
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
