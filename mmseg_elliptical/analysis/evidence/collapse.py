"""Representation collapse per layer: mean pairwise cosine of the tokens,
and the spread of ``m`` (docs/evidence.md)."""
from typing import Dict, List, Optional

import torch
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

from ...models import EllipticalAttentionMixin
from ...robustness.seeds.arms import collapse_arms
from ...robustness.seeds.means import arm_label, mean_tree, several
from ...robustness.seeds.report import arms_markdown, arms_rows
from ...utils.config import ModelSpec, load_config, split_loader
from ...utils.loaders import subset_loader_cfg
from ...utils.output import markdown_table, pyplot, wrap_label, write_report
from .layers import TransformerLayers, transformer_layers
from .measures import (mean_pairwise_cosine, relevance_spread,
                       relevance_statistics)
from .recorder import LayerRecorder

#: Per-image statistics of ``m`` (:class:`CollapseMeter`) and the names of
#: their per-layer results (the minimum of ``m_min``, the mean of the rest).
RELEVANCE_KEYS = dict(
    spread='relevance_spread',
    m_mean='relevance_mean',
    m_min='relevance_min',
    m_effective='relevance_effective')


def inference_mode(test_cfg: Optional[Dict]) -> str:
    """How the segmentor runs at test time, in words (the report's)."""
    test_cfg = test_cfg or {}
    if test_cfg.get('mode') == 'slide':
        crop, stride = test_cfg['crop_size'], test_cfg['stride']
        return (f'slide: per crop of {crop[0]}x{crop[1]}, stride '
                f'{stride[0]}x{stride[1]}')
    return 'whole image'


class CollapseMeter:
    """Context manager: the collapse of every layer over the forwards run
    inside it (call :meth:`collect` after each batch).

    Args:
        found (TransformerLayers): The layers (found with ``convert=True``
            for the spread of ``m``).
    """

    def __init__(self, found: TransformerLayers) -> None:
        self.found = found
        #: One entry per image, in the order collected: per layer the
        #: ``cosine``, ``spread`` and ``m_mean`` / ``m_min`` /
        #: ``m_effective`` of each forward and the counted ``tokens``.
        self.images: List[Dict] = []
        relevance = all(
            isinstance(found.attention(i), EllipticalAttentionMixin)
            for i in range(len(found.layers)))
        self.recorder = LayerRecorder(
            found, relevance=relevance, grids=False, to_cpu=True)

    def __enter__(self) -> 'CollapseMeter':
        self.recorder.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.recorder.__exit__(*exc)

    @torch.no_grad()
    def collect(self) -> None:
        """Take the statistics of the batch recorded since the last call and
        drop its tokens."""
        n = len(self.found.layers)
        batch: List[Dict] = []
        for i, record in enumerate(self.recorder.records):
            for out in record.tokens:
                counted = self.found.counted_tokens(i, out)
                cos = mean_pairwise_cosine(counted).tolist()
                while len(batch) < len(cos):
                    batch.append(
                        dict(
                            tokens=[0] * n,
                            **{
                                k: [[] for _ in range(n)]
                                for k in ('cosine', *RELEVANCE_KEYS)
                            }))
                for image, value in zip(batch, cos):
                    image['cosine'][i].append(value)
                    image['tokens'][i] = counted.shape[1]
            for m in record.relevance:
                stats = relevance_statistics(m)
                stats = dict(
                    spread=relevance_spread(m),
                    **{
                        f'm_{k}': v
                        for k, v in stats.items()
                    })
                for key, values in stats.items():
                    for image, value in zip(batch, values.tolist()):
                        image[key][i].append(value)
        self.images += batch
        self.recorder.clear()

    def result(self, images: Optional[List[Dict]] = None) -> Dict:
        """Per layer ``cosine`` and ``cosine_std`` (over samples: every
        forward of every image), ``relevance_spread``, ``relevance_mean``,
        ``relevance_min`` (the minimum over samples) and
        ``relevance_effective`` (each None for dot-product layers), ``stage``
        and ``tokens`` (counted tokens of the last image), and ``samples``.

        Args:
            images (list[dict], optional): Defaults to :attr:`images`.
        """
        images = self.images if images is None else images
        if not images:
            raise ValueError('No forward of the layers was collected.')
        out = dict(
            cosine=[],
            cosine_std=[],
            **{key: []
               for key in RELEVANCE_KEYS.values()},
            stage=list(self.found.stages),
            tokens=list(images[-1]['tokens']))
        n = len(self.found.layers)
        for i in range(n):
            cos = torch.tensor([v for im in images for v in im['cosine'][i]],
                               dtype=torch.float64)
            out['cosine'].append(cos.mean().item())
            out['cosine_std'].append(cos.std(correction=0).item())
            for key, name in RELEVANCE_KEYS.items():
                values = torch.tensor([v for im in images for v in im[key][i]],
                                      dtype=torch.float64)
                reduce = values.min if key == 'm_min' else values.mean
                out[name].append(reduce().item() if len(values) else None)
        out['samples'] = sum(len(im['cosine'][0]) for im in images)
        return out


@torch.no_grad()
def measure_collapse(spec: ModelSpec,
                     split: str = 'test',
                     part: str = 'backbone',
                     max_images: Optional[int] = None,
                     cfg_options: Optional[dict] = None,
                     device: str = 'cpu',
                     progress: bool = True) -> Optional[Dict]:
    """Per-layer mean pairwise cosine and relevance spread of one model,
    over the config's ``<split>_dataloader`` and ``model.test_step``.

    Args:
        spec (ModelSpec): The model.
        split (str): ``'train'``, ``'val'`` or ``'test'``.
        part (str): ``'backbone'`` or ``'decode_head'``.
        max_images (int, optional): Use only the first images.
        cfg_options (dict, optional): Overrides of the config.
        device (str): ``'cuda'`` is this process's GPU.
        progress (bool): Show a progress bar (rank 0).

    Returns:
        dict: :meth:`CollapseMeter.result` plus ``images`` and
        ``inference``; None on the processes but rank 0.
    """
    from mmengine.dist import collect_results, is_main_process
    from mmseg.apis import init_model
    cfg = load_config(spec.config, cfg_options)
    loader_cfg = subset_loader_cfg(
        split_loader(cfg, split), max_images, shuffle=False)
    if device == 'cuda' and torch.cuda.is_available():
        device = f'cuda:{torch.cuda.current_device()}'
    model = init_model(cfg, spec.checkpoint, device=device)
    found = transformer_layers(model, part, convert=True)  # to record m
    loader = Runner.build_dataloader(loader_cfg)
    bar = ProgressBar(len(loader)) if progress and is_main_process() \
        else None
    with CollapseMeter(found) as meter:
        for batch in loader:
            model.test_step(batch)
            meter.collect()
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.file.write('\n')
    images = collect_results(meter.images, len(loader.dataset), 'cpu')
    if not is_main_process():
        return None
    return dict(
        meter.result(images),
        images=len(images),
        inference=inference_mode(cfg.model.get('test_cfg')))


def collapse_table(results: Dict[str, Dict]) -> tuple:
    """``(header, rows)``: one row per layer, models side by side."""
    names = list(results)
    layers = max(len(r['cosine']) for r in results.values())
    ell = [
        n for n in names
        if any(v is not None for v in results[n]['relevance_spread'])
    ]
    first = results[names[0]]
    header = ['layer', 'stage', 'tokens'] + [f'{n} cos' for n in names] + \
        [f'{n} m spread' for n in ell]
    rows = []
    for i in range(layers):
        row = [
            i, first['stage'][i] if i < len(first['stage']) else None,
            first['tokens'][i] if i < len(first['tokens']) else None
        ]
        for key, models in (('cosine', names), ('relevance_spread', ell)):
            row += [
                results[n][key][i] if i < len(results[n][key]) else None
                for n in models
            ]
        rows.append(row)
    return header, rows


def collapse_figure(results: Dict[str, Dict],
                    part: str,
                    arms: Optional[Dict[str, List[str]]] = None):
    """Cosine per layer (left) and the spread of ``m`` (right, from 0), one
    line per model, the legend below the panels; dotted lines mark where a
    new stage starts. An arm of several runs (``arms``) is one colour: its
    runs thin, their mean thick."""
    from matplotlib.ticker import MaxNLocator
    arms = arms or {n: [n] for n in results}
    ell = [
        n for n, r in results.items()
        if any(v is not None for v in r['relevance_spread'])
    ]
    panels = 2 if ell else 1
    fig, axes = pyplot().subplots(
        1,
        panels,
        figsize=(4.2 * panels, 3.6),
        squeeze=False,
        layout='constrained')
    tops = [0.0]
    for colour, (arm, runs) in enumerate(arms.items()):
        for k, key in enumerate(('cosine', 'relevance_spread')):
            if key == 'relevance_spread' and not set(runs) & set(ell):
                continue
            ax = axes[0][k]
            curves = [results[r][key] for r in runs]
            if len(runs) > 1:
                for values in curves:
                    _line(ax, values, colour, lw=0.7, alpha=0.45, ms=0)
            mean = mean_tree(curves)
            label = wrap_label(arm_label(arm, runs), 50) if k == 0 else None
            shown = _line(ax, mean, colour, lw=1.5, ms=3, label=label)
            tops += shown if k == 1 else []
    axes[0][0].set_ylabel('mean pairwise cosine of tokens')
    axes[0][0].set_title(
        'representation collapse (lower: more diverse)', fontsize=9)
    if ell:
        ax = axes[0][1]
        ax.set_ylim(0, 1.1 * max(tops) or 1)  # a spread: 0 is the dot product
        ax.set_ylabel('std of m over coordinates')
        ax.set_title('spread of the relevance m (0: dot product)', fontsize=9)
    stages = next(iter(results.values()))['stage']
    starts = [i for i in range(1, len(stages)) if stages[i] != stages[i - 1]]
    for ax in axes[0]:
        for i in starts:
            ax.axvline(i - 0.5, color='0.6', ls=':', lw=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f'{part} layer (forward order across stages)')
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if any(len(r) > 1 for r in arms.values()):  # the thin lines, once
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color='0.3', lw=0.7, alpha=0.45))
        labels.append('thin: each run of an arm')
    fig.legend(
        handles,
        labels,
        loc='outside lower center',
        ncols=1 if max(len(n)
                       for n in labels) > 50 // len(labels) else len(labels),
        fontsize=7)
    return fig


def _line(ax, values: List[Optional[float]], colour: int, **style) -> list:
    """Plot the known values of one curve per layer; return them."""
    xs = [i for i, v in enumerate(values) if v is not None]
    ys = [values[i] for i in xs]
    ax.plot(xs, ys, marker='o', color=f'C{colour}', **style)
    return ys


def write_collapse_report(results: Dict[str, Dict],
                          out_dir: str,
                          part: str,
                          arms: Optional[Dict[str, List[str]]] = None) -> str:
    """Write ``collapse.{json,md,csv,png}`` (and, when an arm of ``arms``
    has two or more runs, its mean +- sd per layer in ``collapse.md``,
    ``collapse_arms.{json,csv}``); return the markdown."""
    header, rows = collapse_table(results)
    text = markdown_table(header, rows, left=0)
    notes = [
        f'- {n}: {r["images"]} images, {r["samples"]} samples '
        f'({r["inference"]})' for n, r in results.items()
    ]
    text += '\n' + '\n'.join(notes) + '\n'
    if several(arms):
        by_arm = collapse_arms(arms, results)
        text += '\n' + arms_markdown(by_arm, what='cosine', spec='.3f')
        write_report(
            out_dir, 'collapse_arms', data=by_arm, table=arms_rows(by_arm))
    write_report(
        out_dir,
        'collapse',
        data=results,
        markdown=text,
        table=(header, rows),
        figure=collapse_figure(results, part, arms))
    return text
