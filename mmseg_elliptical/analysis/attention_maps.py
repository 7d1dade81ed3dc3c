"""Where one query patch attends, in chosen layers and heads, per model.

:func:`model_attention` runs a model on one image (mmseg's
``inference_model``, whole-image mode) with its attentions on their explicit
path and keeps the probabilities of the patch under the query pixel, drawn
over the image by :func:`plot_attention`; :func:`plot_relevance` draws the
relevance ``m`` of every elliptical layer (heads x head coordinates).
mmseg's own dot-product models are converted in place to their elliptical
version in dot-product mode, which computes the same.
``tools/analysis_tools/attention_maps.py`` is the command line.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch

from ..utils.config import ModelSpec, load_config
from ..utils.report import pyplot, save_figure
from .layers import transformer_layers
from .recorder import LayerRecorder


def query_patch(point: Sequence[int], ori_shape: Sequence[int],
                img_shape: Sequence[int], stride: Sequence[int],
                grid: Sequence[int]) -> Tuple[int, int]:
    """The patch ``(row, col)`` that covers a pixel of the original image.

    The pipeline resizes the original image to ``img_shape`` and the patch
    embedding pads it at the bottom/right to whole patches; the last row and
    column of patches may thus cover padding.

    Args:
        point (Sequence[int]): ``(x, y)``: column and row in the original
            image.
        ori_shape (Sequence[int]): ``(H, W)`` of the original image.
        img_shape (Sequence[int]): ``(h, w)`` of the resized input.
        stride (Sequence[int]): Patch stride ``(sh, sw)`` in input pixels.
        grid (Sequence[int]): Patch grid ``(rows, cols)``.

    Returns:
        tuple[int, int]: The patch's row and column.

    Raises:
        ValueError: If the point lies outside the original image.
    """
    x, y = point
    if not (0 <= x < ori_shape[1] and 0 <= y < ori_shape[0]):
        raise ValueError(f'point ({x}, {y}) lies outside the {ori_shape[1]} '
                         f'x {ori_shape[0]} image (x is the column, y the '
                         'row).')
    row = int(y * img_shape[0] / ori_shape[0]) // stride[0]
    col = int(x * img_shape[1] / ori_shape[1]) // stride[1]
    return min(row, grid[0] - 1), min(col, grid[1] - 1)


def upsample(grid: np.ndarray, stride: Sequence[int], img_shape: Sequence[int],
             ori_shape: Sequence[int]) -> np.ndarray:
    """A patch-grid map at the original image's resolution.

    Args:
        grid (np.ndarray): ``h x w`` values, one per patch.
        stride (Sequence[int]): Patch stride ``(sh, sw)`` in input pixels.
        img_shape (Sequence[int]): Size of the resized input before padding.
        ori_shape (Sequence[int]): Size of the original image.

    Returns:
        np.ndarray: ``ori_shape`` map.
    """
    full = np.kron(grid, np.ones(tuple(stride), dtype=grid.dtype))
    full = full[:img_shape[0], :img_shape[1]]
    if tuple(full.shape) != tuple(ori_shape[:2]):
        full = cv2.resize(
            full, (int(ori_shape[1]), int(ori_shape[0])),
            interpolation=cv2.INTER_NEAREST)
    return full


@torch.no_grad()
def model_attention(spec: ModelSpec,
                    image: str,
                    point: Sequence[int],
                    layers: Optional[Sequence[int]] = None,
                    part: str = 'backbone',
                    cfg_options: Optional[dict] = None,
                    device: str = 'cpu') -> Dict:
    """Run one model on an image and return its attention rows and ``m``.

    Args:
        spec (ModelSpec): The model.
        image (str): Image file.
        point (Sequence[int]): Query pixel ``(x, y)`` in the image.
        layers (Sequence[int], optional): Layers whose maps are kept
            (default: 1, the middle one and the last).
        part (str): ``'backbone'`` or ``'decode_head'``.
        cfg_options (dict, optional): Overrides of the config.
        device (str): Device. Defaults to ``'cpu'``.

    Returns:
        dict: ``maps`` ``{layer: [H, ori_h, ori_w]}`` (query row over the
        patches), ``cls_mass`` ``{layer: [H]}`` (probability on non-patch
        tokens), ``relevance`` ``{layer: [H, d]}`` of elliptical layers,
        ``num_layers`` and ``num_heads``.
    """
    from mmseg.apis import inference_model, init_model
    cfg = load_config(spec.config, cfg_options)
    cfg.model.test_cfg = dict(mode='whole')  # one forward: one attention
    model = init_model(cfg, spec.checkpoint, device=device)
    found = transformer_layers(model, part, convert=True)
    patch_embed = model.backbone.patch_embed
    with LayerRecorder(
            found.layers,
            tokens=False,
            probs=True,
            relevance=True,
            patch_embed=patch_embed) as rec:
        sample = inference_model(model, image)
    if len(rec.hw_shapes) != 1:
        raise ValueError(f'{spec.name}: expected one forward pass, got '
                         f'{len(rec.hw_shapes)} (test-time augmentation?).')
    h, w = rec.hw_shapes[0]
    stride = tuple(int(s) for s in patch_embed.projection.stride)
    img_shape = sample.metainfo['img_shape']
    ori_shape = sample.metainfo['ori_shape']
    try:
        row, col = query_patch(point, ori_shape, img_shape, stride, (h, w))
    except ValueError as exc:
        raise ValueError(f'point: {exc}') from None
    start = found.patch_slice.start or 0
    query = start + row * w + col
    n = len(found.layers)
    layers = layers if layers else sorted({min(1, n - 1), n // 2, n - 1})
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise ValueError(f'{spec.name}: layers {bad} out of range; the '
                         f'{part} has layers 0..{n - 1}.')
    out = dict(maps={}, cls_mass={}, relevance={}, num_layers=n)
    for i, record in enumerate(rec.records):
        if record.relevance:
            out['relevance'][i] = record.relevance[0][0, :,
                                                      0].float().cpu().numpy()
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
        for c, (i, hd) in enumerate(columns, start=1):
            ax = axes[r][c]
            maps = res['maps'][i]
            amap = maps.mean(0) if hd == 'mean' else maps[hd]
            ax.imshow(gray, cmap='gray', vmin=0, vmax=255)
            ax.imshow(
                amap,
                cmap='inferno',
                alpha=0.8,
                vmin=0,
                vmax=max(float(amap.max()), 1e-8))
            ax.plot(*point, marker='+', color='c', ms=7, mew=1.5)
            cls = res['cls_mass'][i]
            cls = cls.mean() if hd == 'mean' else cls[hd]
            head = 'mean' if hd == 'mean' else f'h{hd}'
            ax.set_title(
                f'L{i} {head}' + (f' cls {cls:.2f}' if cls >= 0.05 else ''),
                fontsize=6)
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
            ax.set_yticks(range(m.shape[0]))
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
    save_figure(fig, path, dpi=100)
    return True
