"""Representation collapse per layer: mean pairwise cosine of patch tokens.

For every image of a split, every transformer layer's output patch tokens
(the cls token excluded) give the mean over pairs ``i < j`` of
``cos(x_i, x_j)``; the tool averages it over images, per layer and model
(the paper's measure of over-smoothing, Fig. 2). For elliptical layers it
also reports the spread of the relevance ``m`` (std over head coordinates,
mean over heads and images): 0 means the metric is a sphere (dot product).
Outputs (in ``--out-dir``): ``collapse.json``, ``collapse.md``,
``collapse.csv`` and ``collapse.png``.

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/collapse.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --split val
"""  # noqa: E501
import argparse
import os
from typing import Dict, List, Optional, Sequence

import torch
from mmengine.config import DictAction
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.analysis import (LayerRecorder, as_elliptical,
                                       mean_pairwise_cosine, relevance_spread,
                                       transformer_layers, unwrap)
from mmseg_elliptical.analysis.robustness import corrupted_loader_cfg
from mmseg_elliptical.utils.cli import (ModelSpec, load_config, model_specs,
                                        split_loader)
from mmseg_elliptical.utils.report import (markdown_table, pyplot,
                                           write_report)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        description='Mean pairwise cosine similarity of patch tokens per '
        'layer (representation collapse), models side by side.')
    parser.add_argument('models', nargs='+', metavar='CONFIG CHECKPOINT',
                        help='pairs of config file and checkpoint')
    parser.add_argument('--names', nargs='+', help='model names')
    parser.add_argument('--split', default='test',
                        choices=['train', 'val', 'test'],
                        help='dataloader of the config to use (default test)')
    parser.add_argument('--part', default='backbone',
                        choices=['backbone', 'decode_head'],
                        help='which transformer to measure')
    parser.add_argument('--max-images', type=int,
                        help='use only the first N images')
    parser.add_argument('--out-dir', default='work_dirs/collapse')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of every config')
    return parser.parse_args(argv)


@torch.no_grad()
def measure(spec: ModelSpec, args: argparse.Namespace) -> Dict:
    """Per-layer mean pairwise cosine and relevance spread of one model.

    Args:
        spec (ModelSpec): The model.
        args (argparse.Namespace): Parsed arguments.

    Returns:
        dict: ``cosine`` and ``cosine_std`` (over images) and
        ``relevance_spread`` (None for dot-product layers) per layer, and
        ``images``.
    """
    from mmseg.apis import init_model
    cfg = load_config(spec.config, args.cfg_options)
    loader_cfg = corrupted_loader_cfg(split_loader(cfg, args.split),
                                      max_images=args.max_images)
    loader_cfg['sampler'] = dict(type='DefaultSampler', shuffle=False)
    model = init_model(cfg, spec.checkpoint, device=args.device)
    found = transformer_layers(model, args.part)
    as_elliptical(getattr(unwrap(model), args.part))  # to record m
    loader = Runner.build_dataloader(loader_cfg)
    bar = ProgressBar(len(loader.dataset))
    n = len(found.layers)
    cos: List[List[torch.Tensor]] = [[] for _ in range(n)]
    spread: List[List[torch.Tensor]] = [[] for _ in range(n)]
    with LayerRecorder(found.layers, relevance=True, to_cpu=True) as rec:
        for batch in loader:
            model.test_step(batch)
            for i, record in enumerate(rec.records):
                for tokens in record.tokens:
                    cos[i].append(
                        mean_pairwise_cosine(tokens[:, found.patch_slice]))
                spread[i] += [relevance_spread(m) for m in record.relevance]
            rec.clear()
            for _ in range(len(batch['inputs'])):
                bar.update()
    result = dict(cosine=[], cosine_std=[], relevance_spread=[])
    for i in range(n):
        values = torch.cat(cos[i])
        result['cosine'].append(values.mean().item())
        result['cosine_std'].append(values.std(correction=0).item())
        result['relevance_spread'].append(
            torch.cat(spread[i]).mean().item() if spread[i] else None)
    result['images'] = int(values.numel())
    return result


def write_reports(results: Dict[str, Dict], out_dir: str, part: str) -> str:
    """Write JSON, markdown, CSV and the line plot; return the markdown."""
    names = list(results)
    layers = max(len(r['cosine']) for r in results.values())
    ell = [n for n in names
           if any(v is not None for v in results[n]['relevance_spread'])]
    header = ['layer'] + [f'{n} cos' for n in names] + \
        [f'{n} m spread' for n in ell]
    rows = []
    for i in range(layers):
        row = [i]
        for key, models in (('cosine', names), ('relevance_spread', ell)):
            row += [results[n][key][i] if i < len(results[n][key]) else None
                    for n in models]
        rows.append(row)
    text = markdown_table(header, rows, left=0)

    from matplotlib.ticker import MaxNLocator
    panels = 2 if ell else 1
    fig, axes = pyplot().subplots(1, panels, figsize=(4.2 * panels, 3.2),
                                  squeeze=False)
    ax = axes[0][0]
    for n in names:
        ax.plot(range(len(results[n]['cosine'])), results[n]['cosine'],
                marker='o', ms=3, label=n)
    ax.set_ylabel('mean pairwise cosine of patch tokens')
    ax.set_title('representation collapse (lower: more diverse)',
                 fontsize=9)
    if ell:
        ax = axes[0][1]
        for n in ell:
            values = results[n]['relevance_spread']
            xs = [i for i, v in enumerate(values) if v is not None]
            ax.plot(xs, [values[i] for i in xs], marker='o', ms=3, label=n)
        ax.set_ylabel('std of m over coordinates')
        ax.set_title('spread of the relevance m (0: dot product)',
                     fontsize=9)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f'{part} layer')
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_report(out_dir, 'collapse', data=results, markdown=text,
                 table=(header, rows), figure=fig)
    return text


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Measure every model; return ``{name: per-layer results}``."""
    args = parse_args(argv)
    try:
        specs = model_specs(args.models, args.names)
    except ValueError as e:
        raise SystemExit(str(e))
    if args.max_images is not None and args.max_images < 1:
        raise SystemExit(f'--max-images {args.max_images} must be >= 1.')
    os.makedirs(args.out_dir, exist_ok=True)
    results = {}
    for spec in specs:
        print(f'{spec.name}:')
        results[spec.name] = measure(spec, args)
        print()
    text = write_reports(results, args.out_dir, args.part)
    print(text)
    print(f'Results in {args.out_dir}/collapse.{{json,md,csv,png}}')
    return results


if __name__ == '__main__':
    main()
