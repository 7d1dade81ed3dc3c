"""Independent oracles of what the evidence and evaluation code measure:
slide inference, the drawing of predictions, token similarity, Swin's
window slots, the robustness summary and the paired bootstrap, written out
with loops and textbook formulas (``oracles.py`` holds the method and the
models)."""
import math
from typing import Dict, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

# ------------------------------------------------------- inference, drawing


def naive_slide_inference(model, img: np.ndarray, crop: int, stride: int,
                          num_classes: int) -> Tensor:
    """Slide inference written out: normalise, crop, average the logits."""
    H, W = img.shape[:2]
    x = torch.from_numpy(img[..., ::-1].copy()).permute(2, 0, 1).float()
    x = ((x - 127.5) / 127.5)[None]
    logits = torch.zeros(1, num_classes, H, W)
    count = torch.zeros(1, 1, H, W)
    ys = sorted(
        {min(y, H - crop)
         for y in range(0, H - crop + stride, stride)})
    xs = sorted(
        {min(x, W - crop)
         for x in range(0, W - crop + stride, stride)})
    with torch.no_grad():
        for y in ys:
            for x0 in xs:
                window = x[..., y:y + crop, x0:x0 + crop]
                out = F.interpolate(
                    model._forward(window),
                    size=(crop, crop),
                    mode='bilinear',
                    align_corners=False)
                logits[..., y:y + crop, x0:x0 + crop] += out
                count[..., y:y + crop, x0:x0 + crop] += 1
    assert count.min() >= 1 and count.max() >= 2  # windows do overlap
    return (logits / count)[0]


def naive_blend(rgb: np.ndarray, seg: np.ndarray, palette,
                alpha: float) -> np.ndarray:
    """mmseg's drawing of a label map over an image."""
    colours = np.asarray(palette, np.float64)[seg]
    return (rgb * (1 - alpha) + colours * alpha).astype(np.uint8)


# ------------------------------------------------------------ the analysis


def pairwise_cosine(tokens: torch.Tensor) -> torch.Tensor:
    """``[B]`` mean of ``cos(x_i, x_j)`` over ``i < j`` from the full
    ``N x N`` similarity matrix."""
    x = tokens.double()
    sim = torch.nn.functional.cosine_similarity(
        x[:, :, None], x[:, None], dim=-1)
    i, j = torch.triu_indices(x.shape[1], x.shape[1], offset=1)
    return sim[:, i, j].mean(-1)


def window_slot(row: int, col: int, padded: int, window: int,
                shift: int) -> tuple:
    """Swin's window (row-major among ``padded // window`` per side) and
    position of grid token ``(row, col)`` of a square grid padded to
    ``padded`` and rolled by ``-shift``, by hand."""
    r, c = (row - shift) % padded, (col - shift) % padded
    per_side = padded // window
    return ((r // window) * per_side + c // window,
            (r % window) * window + c % window)


def robustness_by_hand(cells: Dict[str, Dict], corruptions: Sequence[str],
                       severities: Sequence[int], metric: str,
                       baseline: str) -> Dict[str, Dict]:
    """P, mPC, rPC, CE, mCE, rCE, rmCE and the groups' mPC / mCE of every
    model, from the cells, with numpy arrays (None where a denominator is
    0, and then the means over it too)."""
    groups = dict(
        noise=[
            'gaussian_noise', 'shot_noise', 'impulse_noise', 'speckle_noise'
        ],
        blur=[
            'defocus_blur', 'glass_blur', 'motion_blur', 'zoom_blur',
            'gaussian_blur'
        ],
        weather=['snow', 'frost', 'fog', 'brightness', 'spatter'],
        digital=[
            'contrast', 'elastic_transform', 'pixelate', 'jpeg_compression',
            'saturate'
        ])

    def grid(name):
        return np.array([[cells[name][f'{c}/{s}'][metric] for s in severities]
                         for c in corruptions],
                        dtype=np.float64)

    def ratio(num, den):
        return None if den == 0 else float(num / den)

    def mean(values):
        return None if any(v is None
                           for v in values) else float(np.mean(values))

    base, base_clean = grid(baseline), cells[baseline]['clean'][metric]
    out = {}
    for name in cells:
        g, clean = grid(name), cells[name]['clean'][metric]
        ce = [
            ratio((100 - g[i]).sum(), (100 - base[i]).sum())
            for i in range(len(corruptions))
        ]
        rce = [
            ratio((clean - g[i]).sum(), (base_clean - base[i]).sum())
            for i in range(len(corruptions))
        ]
        rows = {c: i for i, c in enumerate(corruptions)}
        out[name] = dict(
            P=clean,
            mPC=float(g.mean()),
            rPC=float(g.mean() / clean),
            CE=dict(zip(corruptions, ce)),
            rCE=dict(zip(corruptions, rce)),
            mCE=mean(ce),
            rmCE=mean(rce),
            groups={
                k:
                dict(
                    mPC=float(g[[rows[c] for c in v if c in rows]].mean()),
                    mCE=mean([ce[rows[c]] for c in v if c in rows]),
                    rmCE=mean([rce[rows[c]] for c in v if c in rows]))
                for k, v in groups.items() if any(c in rows for c in v)
            })
    return out


def bootstrap_by_hand(a, b, resamples: int, seed: int) -> Dict:
    """The paired bootstrap of ``mean over cells of mIoU(a) - (b)``, one
    resample at a time: the drawn images' areas summed by indexing and
    mIoU by mmseg's own ``IoUMetric.total_area_to_metrics``."""
    from mmseg.evaluation import IoUMetric
    n = a[0][0].shape[0]
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))

    def stat(cells, idx):
        values = []
        for inter, union in cells:
            i, u = inter[idx].sum(0), union[idx].sum(0)
            iou = IoUMetric.total_area_to_metrics(
                torch.tensor(i), torch.tensor(u), torch.tensor(u),
                torch.tensor(u), ['mIoU'])['IoU']
            values.append(np.nanmean(iou) * 100)
        return np.mean(values)

    diffs = [stat(a, idx) - stat(b, idx) for idx in draws]
    full = np.arange(n)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return dict(difference=stat(a, full) - stat(b, full), low=low, high=high)


# ------------------------------------------------- m and attention entropy


def relevance_statistics_by_hand(m: torch.Tensor) -> Dict[str, list]:
    """Per sample of ``m [B, H, 1, d]``: mean and min over every value, and
    the mean over heads of ``(sum m)^2 / (d sum m^2)``, with loops."""
    out = dict(mean=[], min=[], effective=[])
    for sample in m.double().tolist():
        values = [v for head in sample for v in head[0]]
        out['mean'].append(sum(values) / len(values))
        out['min'].append(min(values))
        eff = [
            sum(h[0])**2 / (len(h[0]) * sum(v * v for v in h[0]))
            for h in sample
        ]
        out['effective'].append(sum(eff) / len(eff))
    return out


def entropy_by_hand(probs: torch.Tensor) -> list:
    """Per batch entry of ``probs [B, H, N, M]``: the mean over heads and
    rows of ``-sum p ln p`` (0 ln 0 = 0), with loops."""
    out = []
    for sample in probs.double().tolist():
        rows = [row for head in sample for row in head]
        out.append(
            sum(-sum(p * math.log(p) for p in row if p > 0)
                for row in rows) / len(rows))
    return out
