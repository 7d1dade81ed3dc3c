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

    python tools/attention_maps.py \\
        data/demo_shapes/images/validation/demo_00002.jpg \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --point 28 48 --layers 1 3 5
"""  # noqa: E501
import argparse
import os.path as osp
from typing import Dict, List, Optional, Sequence

import cv2
import numpy as np
import torch
from mmengine.config import DictAction

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import (LayerRecorder, as_elliptical,
                                       query_patch, transformer_layers,
                                       unwrap, upsample)
from mmseg_elliptical.utils.cli import ModelSpec, load_config, model_specs
from mmseg_elliptical.utils.report import pyplot, save_figure


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='Attention of one query patch over the image, models '
        'side by side, and the relevance m of elliptical layers.')
    parser.add_argument('image', help='image file')
    parser.add_argument('models', nargs='+', metavar='CONFIG CHECKPOINT',
                        help='pairs of config file and checkpoint')
    parser.add_argument('--point', nargs=2, type=int, required=True,
                        metavar=('X', 'Y'),
                        help='query pixel (column, row) in the image')
    parser.add_argument('--layers', nargs='+', type=int,
                        help='layers to show (default: 1, middle, last)')
    parser.add_argument('--heads', nargs='+', type=int,
                        help='heads to show (default: all)')
    parser.add_argument('--mean-heads', action='store_true',
                        help='add a column with the mean over heads')
    parser.add_argument('--part', default='backbone',
                        choices=['backbone', 'decode_head'])
    parser.add_argument('--names', nargs='+', help='model names')
    parser.add_argument('--out', default='work_dirs/attention/attention.png',
                        help='attention figure')
    parser.add_argument(
        '--relevance-out', default=None,
        help='m figure (default: <out stem>_relevance.png next to --out)')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of every config')
    return parser.parse_args(argv)


@torch.no_grad()
def model_attention(spec: ModelSpec, args: argparse.Namespace) -> Dict:
    """Run one model and return its attention rows and ``m``.

    Args:
        spec (ModelSpec): The model.
        args (argparse.Namespace): Parsed arguments.

    Returns:
        dict: ``maps`` ``{layer: [H, ori_h, ori_w]}`` (query row over the
        patches), ``cls_mass`` ``{layer: [H]}`` (probability on non-patch
        tokens), ``relevance`` ``{layer: [H, d]}`` of elliptical layers,
        ``num_layers`` and ``num_heads``.
    """
    from mmseg.apis import inference_model, init_model
    cfg = load_config(spec.config, args.cfg_options)
    cfg.model.test_cfg = dict(mode='whole')  # one forward: one attention
    model = init_model(cfg, spec.checkpoint, device=args.device)
    found = transformer_layers(model, args.part)
    as_elliptical(getattr(unwrap(model), args.part))
    patch_embed = model.backbone.patch_embed
    with LayerRecorder(found.layers, tokens=False, probs=True,
                       relevance=True, patch_embed=patch_embed) as rec:
        sample = inference_model(model, args.image)
    if len(rec.hw_shapes) != 1:
        raise SystemExit(f'{spec.name}: expected one forward pass, got '
                         f'{len(rec.hw_shapes)} (test-time augmentation?).')
    h, w = rec.hw_shapes[0]
    stride = tuple(int(s) for s in patch_embed.projection.stride)
    img_shape = sample.metainfo['img_shape']
    ori_shape = sample.metainfo['ori_shape']
    try:
        row, col = query_patch(args.point, ori_shape, img_shape, stride,
                               (h, w))
    except ValueError as exc:
        raise SystemExit(f'--point: {exc}')
    start = found.patch_slice.start or 0
    query = start + row * w + col
    n = len(found.layers)
    layers = args.layers if args.layers else sorted({min(1, n - 1), n // 2,
                                                     n - 1})
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise SystemExit(f'{spec.name}: --layers {bad} out of range; the '
                         f'{args.part} has layers 0..{n - 1}.')
    out = dict(maps={}, cls_mass={}, relevance={}, num_layers=n)
    for i, record in enumerate(rec.records):
        if record.relevance:
            out['relevance'][i] = record.relevance[0][0, :, 0].float().cpu(
            ).numpy()
        if i not in layers:
            continue
        probs = record.probs[0][0, :, query]
        patches = probs[:, found.patch_slice].float().cpu().numpy()
        out['cls_mass'][i] = 1 - patches.sum(-1)
        out['maps'][i] = np.stack([
            upsample(p.reshape(h, w), stride, img_shape, ori_shape)
            for p in patches
        ])
    out['num_heads'] = next(iter(out['maps'].values())).shape[0]
    return out


def plot_attention(image: np.ndarray, results: Dict[str, Dict],
                   point: Sequence[int], layers: List[int],
                   heads: Optional[List[int]], mean_heads: bool,
                   path: str) -> None:
    """Grid: rows are models, columns the image then (layer, head) maps.

    Each map is scaled to its own maximum; the title gives the probability
    the query puts on non-patch tokens (cls token, class embeddings) when
    it is at least 0.05.
    """
    plt = pyplot()
    columns = []
    for i in layers:
        columns += [(i, hd) for hd in heads]
        if mean_heads:
            columns.append((i, 'mean'))
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    fig, axes = plt.subplots(
        len(results), len(columns) + 1, squeeze=False,
        figsize=(1.35 * (len(columns) + 1), 1.55 * len(results)))
    for r, (name, res) in enumerate(results.items()):
        ax = axes[r][0]
        ax.imshow(image)
        ax.plot(*point, marker='+', color='w', ms=9, mew=2)
        ax.set_ylabel(name, fontsize=7)
        ax.set_title('query', fontsize=7)
        for c, (i, hd) in enumerate(columns, start=1):
            ax = axes[r][c]
            maps = res['maps'][i]
            amap = maps.mean(0) if hd == 'mean' else maps[hd]
            ax.imshow(gray, cmap='gray', vmin=0, vmax=255)
            ax.imshow(amap, cmap='inferno', alpha=0.8,
                      vmin=0, vmax=max(float(amap.max()), 1e-8))
            ax.plot(*point, marker='+', color='c', ms=7, mew=1.5)
            cls = res['cls_mass'][i]
            cls = cls.mean() if hd == 'mean' else cls[hd]
            head = 'mean' if hd == 'mean' else f'h{hd}'
            ax.set_title(f'L{i} {head}' + (f' cls {cls:.2f}' if cls >= 0.05
                                           else ''), fontsize=6)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout(pad=0.3)
    save_figure(fig, path, dpi=100, compact=True)


def plot_relevance(results: Dict[str, Dict], path: str, part: str) -> bool:
    """Heatmaps of ``m`` (heads x coordinates) per elliptical layer.

    Returns:
        bool: False (nothing written) when no model is elliptical.
    """
    ell = {n: r['relevance'] for n, r in results.items() if r['relevance']}
    if not ell:
        return False
    plt = pyplot()
    rows = max(len(v) for v in ell.values())
    fig, axes = plt.subplots(rows, len(ell), squeeze=False,
                             figsize=(4.5 * len(ell), 0.55 * rows + 0.8))
    for c, (name, rel) in enumerate(ell.items()):
        for r, (i, m) in enumerate(sorted(rel.items())):
            ax = axes[r][c]
            im = ax.imshow(m, cmap='viridis', vmin=0, vmax=1, aspect='auto',
                           interpolation='nearest')
            ax.set_yticks(range(m.shape[0]))
            ax.tick_params(labelsize=5)
            ax.set_ylabel(f'L{i}', fontsize=6, rotation=0, labelpad=10)
            if r == 0:
                ax.set_title(f'{name}: m of the elliptical {part} layers\n'
                             '(rows: heads, columns: head coordinates)',
                             fontsize=7)
            if r != len(rel) - 1:
                ax.set_xticks([])
        for r in range(len(rel), rows):
            axes[r][c].axis('off')
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label='m')
    save_figure(fig, path, dpi=100)
    return True


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Draw the figures; return the per-model results."""
    args = parse_args(argv)
    if not osp.isfile(args.image):
        raise SystemExit(f'image {args.image} does not exist.')
    try:
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    results = {s.name: model_attention(s, args) for s in specs}
    layers = sorted(set.intersection(*(set(r['maps'])
                                       for r in results.values())))
    num_heads = min(r['num_heads'] for r in results.values())
    heads = args.heads if args.heads else list(range(num_heads))
    bad = [hd for hd in heads if not 0 <= hd < num_heads]
    if bad:
        raise SystemExit(f'--heads {bad} out of range; the models have '
                         f'heads 0..{num_heads - 1}.')
    image = cv2.cvtColor(cv2.imread(args.image), cv2.COLOR_BGR2RGB)
    plot_attention(image, results, args.point, layers, heads,
                   args.mean_heads, args.out)
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
