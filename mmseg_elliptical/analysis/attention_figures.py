"""Figures of :func:`~.attention_maps.model_attention`'s results."""
from typing import Dict, List, Optional, Sequence

import cv2
import numpy as np

from ..utils.output import pyplot, save_figure
from .attention_maps import image_maps
from .layers import AnalysisError

#: Heads drawn per layer when none are chosen.
DEFAULT_HEADS = 4


def shown_layers(results: Dict[str, Dict]) -> List[int]:
    """The layers every model has maps of."""
    return sorted(
        set.intersection(*(set(r['layers']) for r in results.values())))


def shown_heads(results: Dict[str, Dict], layers: Sequence[int],
                heads: Optional[Sequence[int]]) -> List[int]:
    """The chosen heads, checked; by default the first
    :data:`DEFAULT_HEADS` of the widest layer.

    Raises:
        AnalysisError: A head that no shown layer has.
    """
    most = max(
        len(r['layers'][i]['maps']) for r in results.values() for i in layers)
    if not heads:
        return list(range(min(most, DEFAULT_HEADS)))
    bad = [hd for hd in heads if not 0 <= hd < most]
    if bad:
        raise AnalysisError(f'heads {bad} out of range; the layers shown '
                            'have '
                            f'heads 0..{most - 1}.')
    return list(heads)


def plot_attention(image: np.ndarray, results: Dict[str, Dict],
                   point: Sequence[int], layers: List[int], heads: List[int],
                   mean_heads: bool, path: str) -> None:
    """Save :func:`attention_figure` as ``path``."""
    save_figure(
        attention_figure(image, results, point, layers, heads, mean_heads),
        path,
        dpi=100,
        compact=True)


def attention_figure(image: np.ndarray, results: Dict[str, Dict],
                     point: Sequence[int], layers: List[int], heads: List[int],
                     mean_heads: bool):
    """Grid: rows are models, columns the image then (layer, head) maps.

    Each map is scaled to its own maximum; the title gives the layer, its
    stage, the head and, when at least 0.05, the probability on tokens that
    are no grid cells (cls token, class embeddings, Swin's padding). A head
    a layer does not have is left blank.
    """
    plt = pyplot()
    columns = []
    for i in layers:
        columns += [(i, hd) for hd in heads]
        if mean_heads:
            columns.append((i, 'mean'))
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    fig, axes = plt.subplots(
        len(results),
        len(columns) + 1,
        squeeze=False,
        figsize=(1.35 * (len(columns) + 1), 1.55 * len(results)))
    for r, (name, res) in enumerate(results.items()):
        ax = axes[r][0]
        ax.imshow(image)
        ax.plot(*point, marker='+', color='w', ms=9, mew=2)
        ax.set_ylabel(name, fontsize=7)
        ax.set_title('query', fontsize=7)
        full = {i: image_maps(res, i) for i in layers}
        for c, (i, hd) in enumerate(columns, start=1):
            ax = axes[r][c]
            maps, entry = full[i], res['layers'][i]
            if hd != 'mean' and hd >= len(maps):
                ax.axis('off')
                continue
            amap = maps.mean(0) if hd == 'mean' else maps[hd]
            ax.imshow(gray, cmap='gray', vmin=0, vmax=255)
            ax.imshow(
                amap,
                cmap='inferno',
                alpha=0.8,
                vmin=0,
                vmax=max(float(amap.max()), 1e-8))
            ax.plot(*point, marker='+', color='c', ms=7, mew=1.5)
            off = entry['off_grid']
            off = float(np.mean(off) if hd == 'mean' else off[hd])
            head = 'mean' if hd == 'mean' else f'h{hd}'
            ax.set_title(
                f'L{i} s{entry["stage"]} {head}' +
                (f' off {off:.2f}' if off >= 0.05 else ''),
                fontsize=6)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout(pad=0.3)
    return fig


def plot_relevance(results: Dict[str, Dict], path: str, part: str) -> bool:
    """Save :func:`relevance_figure` as ``path``.

    Returns:
        bool: False (nothing written) when no model is elliptical.
    """
    fig = relevance_figure(results, part)
    if fig is not None:
        save_figure(fig, path, dpi=100)
    return fig is not None


def relevance_figure(results: Dict[str, Dict], part: str):
    """Heatmaps of ``m`` (heads x coordinates) per elliptical layer; None
    when no model is elliptical."""
    ell = {n: r['relevance'] for n, r in results.items() if r['relevance']}
    if not ell:
        return None
    plt = pyplot()
    rows = max(len(v) for v in ell.values())
    fig, axes = plt.subplots(
        rows,
        len(ell),
        squeeze=False,
        figsize=(4.5 * len(ell), 0.55 * rows + 0.8))
    for c, (name, rel) in enumerate(ell.items()):
        for r, (i, m) in enumerate(sorted(rel.items())):
            ax = axes[r][c]
            im = ax.imshow(
                m,
                cmap='viridis',
                vmin=0,
                vmax=1,
                aspect='auto',
                interpolation='nearest')
            ax.set_yticks([0, m.shape[0] - 1])
            ax.tick_params(labelsize=5)
            ax.set_ylabel(f'L{i}', fontsize=6, rotation=0, labelpad=10)
            if r == 0:
                ax.set_title(
                    f'{name}: m of the elliptical {part} layers\n'
                    '(rows: heads, columns: head coordinates)',
                    fontsize=7)
            if r != len(rel) - 1:
                ax.set_xticks([])
        for r in range(len(rel), rows):
            axes[r][c].axis('off')
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label='m')
    return fig
