"""Figures of :func:`~.attention_maps.model_attention`'s results."""
import textwrap
from typing import Dict, List, Optional, Sequence

import cv2
import numpy as np

from ...utils.output import pyplot, save_figure, wrap_label
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


#: The caption under the attention maps: what their titles and colours mean.
CAPTION = ('Titles: L = layer (forward order across stages), s = its stage, '
           'h = head (mean: the mean over heads); off = the attention '
           'probability on tokens that are no grid cells (cls token, class '
           'embeddings, padding), shown from 0.05. Each map is scaled to its '
           'own maximum. +: the query.')


def attention_figure(image: np.ndarray,
                     results: Dict[str, Dict],
                     point: Sequence[int],
                     layers: List[int],
                     heads: List[int],
                     mean_heads: bool,
                     rows: str = 'models'):
    """Grid: rows are models (``rows='layers'``: a row per model and
    layer, readable where a row of every layer's maps would be a strip),
    columns the image then (layer, head) maps, each scaled to its own
    maximum; :data:`CAPTION` explains the titles. A head a layer does not
    have is left blank.

    Returns:
        matplotlib.figure.Figure: The figure.
    """
    plt = pyplot()

    def columns(shown: List[int]) -> list:
        out = []
        for i in shown:
            out += [(i, hd) for hd in heads]
            if mean_heads:
                out.append((i, 'mean'))
        return out

    lines = [(name, res, columns(layers)) for name, res in results.items()]
    if rows == 'layers':
        lines = [(f'{name} L{i}', res, columns([i]))
                 for name, res in results.items() for i in layers]
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    width = 1.35 * (max(len(c) for _, _, c in lines) + 1) + 0.5
    fig, axes = plt.subplots(
        len(lines),
        max(len(c) for _, _, c in lines) + 1,
        squeeze=False,
        layout='constrained',
        figsize=(width, 1.4 * len(lines) + 0.5))
    for r, (name, res, cols) in enumerate(lines):
        ax = axes[r][0]
        ax.imshow(image)
        ax.plot(*point, marker='+', color='w', ms=9, mew=2)
        ax.set_ylabel(wrap_label(name, 24), fontsize=7)
        ax.set_title('query', fontsize=7)
        full = {i: image_maps(res, i) for i in {i for i, _ in cols}}
        for c, (i, hd) in enumerate(cols, start=1):
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
    bar = fig.colorbar(
        plt.cm.ScalarMappable(plt.Normalize(0, 1), 'inferno'),
        ax=axes.ravel().tolist(),
        shrink=0.9,
        pad=0.01,
        aspect=10 * len(lines))
    bar.set_label('attention / the map\'s maximum', fontsize=6)
    bar.ax.tick_params(labelsize=6)
    fig.supxlabel(textwrap.fill(CAPTION, int(17 * width)), fontsize=6)
    return fig


def plot_attention(image: np.ndarray, results: Dict[str, Dict],
                   point: Sequence[int], layers: List[int], heads: List[int],
                   mean_heads: bool, path: str) -> None:
    """Save :func:`attention_figure` as the PNG ``path``."""
    save_figure(
        attention_figure(image, results, point, layers, heads, mean_heads),
        path,
        dpi=100,
        compact=True)


def relevance_figure(results: Dict[str, Dict], part: str):
    """Heatmaps of ``m`` (heads x coordinates) per elliptical layer, a
    column per elliptical model (its name wrapped to the column).

    Returns:
        matplotlib.figure.Figure or None: None when no model is elliptical.
    """
    ell = {n: r['relevance'] for n, r in results.items() if r['relevance']}
    if not ell:
        return None
    plt = pyplot()
    rows = max(len(v) for v in ell.values())
    fig, axes = plt.subplots(
        rows,
        len(ell),
        squeeze=False,
        layout='constrained',
        figsize=(4.5 * len(ell), 0.55 * rows + 1.1))
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
                    f'{wrap_label(name, 60)}\nm of the elliptical {part} '
                    'layers\n(rows: heads, columns: head coordinates)',
                    fontsize=7)
            if r != len(rel) - 1:
                ax.set_xticks([])
        for r in range(len(rel), rows):
            axes[r][c].axis('off')
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label='m')
    return fig


def plot_relevance(results: Dict[str, Dict], path: str, part: str) -> bool:
    """Save :func:`relevance_figure` as the PNG ``path``.

    Returns:
        bool: False (nothing written) when no model is elliptical.
    """
    fig = relevance_figure(results, part)
    if fig is None:
        return False
    save_figure(fig, path, dpi=100)
    return True
