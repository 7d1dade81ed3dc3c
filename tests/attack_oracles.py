"""The attacks written out by hand, independently of
``mmseg_elliptical.robustness.attacks.pgd``: normalisation by the
config's mean and std, mmseg's ``inference`` (whole or slide), the resize to
the label's size, the per-pixel losses from log-softmax, and the ascent and
projection steps with textbook formulas, one image at a time."""
import itertools
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

UNIT = dict(linf=1., l2=255.)


def logits_by_hand(model, x: Tensor, meta: Dict) -> Tensor:
    """``[C, H, W]`` logits at the label's size of one 0-255 image."""
    pre = model.data_preprocessor
    if pre.channel_conversion:
        x = x[[2, 1, 0]]
    # float32 images as mmseg's preprocessor casts them (a model in float64
    # normalises them in float64).
    xn = (x.float() - pre.mean) / pre.std
    h, w = xn.shape[-2:]
    meta = dict(
        meta,
        img_shape=(h, w),
        pad_shape=(h, w),
        batch_input_shape=(h, w),
        padding_size=[0, 0, 0, 0])
    logits = model.inference(xn[None], [meta])
    return F.interpolate(
        logits,
        size=tuple(meta['ori_shape']),
        mode='bilinear',
        align_corners=model.align_corners)[0]


def loss_by_hand(name: str, logits: Tensor, labels: Tensor, ignore: int,
                 t: int, steps: int) -> Tensor:
    """Mean over labelled pixels of the (weighted) cross-entropy."""
    C = logits.shape[0]
    logp = logits.log_softmax(0)
    valid = labels != ignore
    safe = labels.clone()
    safe[~valid] = 0
    onehot = F.one_hot(safe, C).permute(2, 0, 1).to(logits.dtype)
    ce = -(logp * onehot).sum(0)
    if name == 'segpgd':
        lam = t / (2 * steps)
        right = (logits.detach().argmax(0) == safe).to(logits.dtype)
        ce = ce * (right * (1 - lam) + (1 - right) * lam)
    elif name == 'cospgd':
        p = logits.detach().softmax(0)
        cos = (p * onehot).sum(0) / (p.norm(dim=0) * onehot.norm(dim=0))
        ce = ce * cos
    return ce[valid].sum() / max(int(valid.sum()), 1)


def attack_by_hand(model,
                   image: Tensor,
                   meta: Dict,
                   gt: Optional[Tensor],
                   name: str,
                   norm: str,
                   eps: float,
                   steps: int,
                   step: float,
                   labels: str = 'gt',
                   start: Optional[Tensor] = None,
                   ignore: int = 255) -> Tensor:
    """One image's adversarial version (``image``: ``[3, H, W]``, 0-255)."""
    if name == 'fgsm':
        steps, step, start = 1, eps, None
    x0 = image.to(torch.promote_types(image.dtype, torch.float32))
    eps_px, alpha = eps * UNIT[norm], step * UNIT[norm]
    if labels == 'prediction':
        with torch.no_grad():
            target = logits_by_hand(model, x0, meta).argmax(0)
    else:
        target = gt.long()
    x = x0.clone() if start is None else start.clone()
    for t in range(steps):
        x.requires_grad_(True)
        loss = loss_by_hand(name, logits_by_hand(model, x, meta), target,
                            ignore, t, steps)
        g, = torch.autograd.grad(loss, [x])
        with torch.no_grad():
            if norm == 'linf':
                x = x + alpha * torch.sign(g)
                x = torch.maximum(torch.minimum(x, x0 + eps_px), x0 - eps_px)
            else:
                x = x + alpha * g / float(g.norm())
                d = x - x0
                n = float(d.norm())
                if n > eps_px:
                    d = d * (eps_px / n)
                x = x0 + d
            x = torch.clamp(x, 0, 255).detach()
    return x


def min_accuracy_by_hand(cells: List[tuple], labelled: np.ndarray) -> tuple:
    """Per image the cell of lowest pixel accuracy (correct over labelled
    pixels, the first on a tie), and the pooled accuracy (percent) of that
    choice, with loops."""
    pick, correct = [], 0
    for i in range(cells[0][0].shape[0]):
        accs = [float(a[i].sum()) / max(int(labelled[i]), 1) for a, _ in cells]
        j = accs.index(min(accs))
        pick.append(j)
        correct += int(cells[j][0][i].sum())
    return pick, 100 * correct / int(np.sum(labelled))


def chosen_areas(cells: List[tuple], choice: List[int]) -> tuple:
    """The ``(intersect, union)`` rows of each image's chosen cell."""
    return (np.array([cells[c][0][i] for i, c in enumerate(choice)]),
            np.array([cells[c][1][i] for i, c in enumerate(choice)]))


def switches_that_lower(cells: List[tuple],
                        choice: List[int],
                        tol: float = 1e-9) -> List[tuple]:
    """Every ``(image, cell)`` whose switch alone lowers the pooled mIoU of
    ``choice`` (empty: a local optimum), with loops."""
    now = miou_by_hand(*chosen_areas(cells, choice))
    found = []
    for i in range(len(choice)):
        for c in range(len(cells)):
            other = list(choice)
            other[i] = c
            if miou_by_hand(*chosen_areas(cells, other)) < now - tol:
                found.append((i, c))
    return found


def lowest_miou_brute_force(cells: List[tuple]) -> float:
    """The lowest pooled mIoU over every choice of one cell per image."""
    images = cells[0][0].shape[0]
    return min(
        miou_by_hand(*chosen_areas(cells, list(choice)))
        for choice in itertools.product(range(len(cells)), repeat=images))


def miou_by_hand(inter: np.ndarray, union: np.ndarray) -> float:
    """mIoU (percent) over the images of summed areas."""
    i, u = inter.sum(0), union.sum(0)
    present = u > 0
    return float(100 * np.mean(i[present] / u[present]))
