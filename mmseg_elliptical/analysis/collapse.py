"""Representation collapse per layer: mean pairwise cosine of patch tokens.

For every image, every transformer layer's output patch tokens (the cls
token excluded) give the mean over pairs ``i < j`` of ``cos(x_i, x_j)``
(:func:`~.statistics.mean_pairwise_cosine`), averaged over images, per layer
(the paper's measure of over-smoothing). For elliptical layers the spread of
the relevance ``m`` (std over head coordinates, mean over heads and images)
comes with it: 0 means the metric is a sphere (dot product).
``tools/analysis_tools/collapse.py`` is the command line.
"""
from typing import Dict, List, Optional

import torch
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

from ..utils.config import ModelSpec, load_config, split_loader
from ..utils.report import markdown_table, pyplot, write_report
from .layers import transformer_layers
from .loaders import subset_loader_cfg
from .recorder import LayerRecorder
from .statistics import mean_pairwise_cosine, relevance_spread


@torch.no_grad()
def measure_collapse(spec: ModelSpec,
                     split: str = 'test',
                     part: str = 'backbone',
                     max_images: Optional[int] = None,
                     cfg_options: Optional[dict] = None,
                     device: str = 'cpu') -> Dict:
    """Per-layer mean pairwise cosine and relevance spread of one model.

    Args:
        spec (ModelSpec): The model.
        split (str): The config's dataloader: ``'train'``, ``'val'`` or
            ``'test'``. Defaults to ``'test'``.
        part (str): ``'backbone'`` or ``'decode_head'``.
        max_images (int, optional): Use only the first images.
        cfg_options (dict, optional): Overrides of the config.
        device (str): Device. Defaults to ``'cpu'``.

    Returns:
        dict: ``cosine`` and ``cosine_std`` (over images) and
        ``relevance_spread`` (None for dot-product layers) per layer, and
        ``images``.
    """
    from mmseg.apis import init_model
    cfg = load_config(spec.config, cfg_options)
    loader_cfg = subset_loader_cfg(
        split_loader(cfg, split), max_images, shuffle=False)
    model = init_model(cfg, spec.checkpoint, device=device)
    found = transformer_layers(model, part, convert=True)  # to record m
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


def write_collapse_report(results: Dict[str, Dict], out_dir: str,
                          part: str) -> str:
    """Write ``collapse.{json,md,csv,png}`` (the figure: cosine and the
    spread of ``m`` per layer, models side by side); return the markdown.
    """
    names = list(results)
    layers = max(len(r['cosine']) for r in results.values())
    ell = [
        n for n in names
        if any(v is not None for v in results[n]['relevance_spread'])
    ]
    header = ['layer'] + [f'{n} cos' for n in names] + \
        [f'{n} m spread' for n in ell]
    rows = []
    for i in range(layers):
        row = [i]
        for key, models in (('cosine', names), ('relevance_spread', ell)):
            row += [
                results[n][key][i] if i < len(results[n][key]) else None
                for n in models
            ]
        rows.append(row)
    text = markdown_table(header, rows, left=0)

    from matplotlib.ticker import MaxNLocator
    panels = 2 if ell else 1
    fig, axes = pyplot().subplots(
        1, panels, figsize=(4.2 * panels, 3.2), squeeze=False)
    ax = axes[0][0]
    for n in names:
        ax.plot(
            range(len(results[n]['cosine'])),
            results[n]['cosine'],
            marker='o',
            ms=3,
            label=n)
    ax.set_ylabel('mean pairwise cosine of patch tokens')
    ax.set_title('representation collapse (lower: more diverse)', fontsize=9)
    if ell:
        ax = axes[0][1]
        for n in ell:
            values = results[n]['relevance_spread']
            xs = [i for i, v in enumerate(values) if v is not None]
            ax.plot(xs, [values[i] for i in xs], marker='o', ms=3, label=n)
        ax.set_ylabel('std of m over coordinates')
        ax.set_title('spread of the relevance m (0: dot product)', fontsize=9)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f'{part} layer')
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_report(
        out_dir,
        'collapse',
        data=results,
        markdown=text,
        table=(header, rows),
        figure=fig)
    return text
