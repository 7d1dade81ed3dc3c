"""APGD with SEA's losses written out again, independently of
``mmseg_elliptical.robustness.attacks.apgd`` and ``losses``: one
image at a time (SEA's ``apgd_largereps`` / ``apgd_train`` at batch size
1, where its early stop is per image), in SEA's order of operations, with
the losses from log-softmax and one-hot labels, and the class weights
counted with numpy."""
import math
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
from torch import Tensor


def one_hot(labels: Tensor, classes: int) -> Tensor:
    """``[C, H, W]`` one-hot of ``[H, W]`` labels (all in range)."""
    return torch.stack([(labels == c) for c in range(classes)]).float()


def loss_by_hand(name: str,
                 logits: Tensor,
                 labels: Tensor,
                 ignore: int,
                 weights: Optional[List[float]] = None) -> Tensor:
    """Mean over labelled pixels of SEA's per-pixel loss; ``'ce'`` (and
    ``'apgd-ce'``): the plain cross-entropy its step-size control tracks;
    ``'apgd-dlr'``: the DLR margin."""
    C = logits.shape[0]
    valid = (labels != ignore).float()
    safe = torch.where(labels != ignore, labels, torch.zeros_like(labels))
    y = one_hot(safe, C)
    logp = logits.log_softmax(0)
    if name == 'apgd-js':
        p = logp.exp()
        m = (p + y) / 2
        per_class = 0.5 * (p * (logp - m.log())) + 0.5 * torch.where(
            y > 0, y *
            (y.clamp_min(1e-45).log() - m.log()), torch.zeros_like(y))
        pixel = per_class.sum(0)
    elif name == 'apgd-dlr':  # the DLR margin on the pixels still right
        ranked = logits.sort(0, descending=True).values
        true = (logits * y).sum(0)
        other = torch.where(y > 0, torch.full_like(logits, -float('inf')),
                            logits).max(0).values
        right = (logits.detach().argmax(0) == safe).float()
        pixel = -(true - other) / (ranked[0] - ranked[2] + 1e-12) * right
    else:
        pixel = -(logp * y).sum(0)
        if name not in ('ce', 'apgd-ce'):
            right = (logits.detach().argmax(0) == safe).float()
            pixel = pixel * right
        if name == 'apgd-mce-bal':
            pixel = pixel * torch.tensor(weights)[safe]
    return (pixel * valid).sum() / max(float(valid.sum()), 1.)


def accuracy_by_hand(logits: Tensor, labels: Tensor, ignore: int) -> float:
    valid = labels != ignore
    right = (logits.argmax(0) == labels) & valid
    return float(right.sum()) / max(int(valid.sum()), 1)


def clip(x: Tensor, x0: Tensor, norm: str, r: float) -> Tensor:
    if norm == 'linf':
        x = torch.clamp(x, x0 - r, x0 + r)
    else:
        d = x - x0
        n = torch.sqrt((d**2).sum())
        x = x0 + d / (n + 1e-12) * torch.clamp(n, max=r)
    return torch.clamp(x, 0., 255.)


def stage_by_hand(f: Callable, x0: Tensor, y: Tensor, name: str, norm: str,
                  r: float, n: int, x_init: Tensor, ignore: int,
                  weights) -> tuple:
    """SEA's ``apgd_train`` on one image; returns its kept point and the
    record (radius, steps, halvings, kept iteration, accuracy)."""

    def probe(x, need_grad):
        x = x.clone().detach().requires_grad_(need_grad)
        with torch.set_grad_enabled(need_grad):
            logits = f(x)
            g = None
            if need_grad:
                g, = torch.autograd.grad(
                    loss_by_hand(name, logits, y, ignore, weights), [x])
        logits = logits.detach()
        tracked = name if name == 'apgd-dlr' else 'ce'  # the margin's own
        return g, float(loss_by_hand(tracked, logits, y, ignore)), \
            accuracy_by_hand(logits, y, ignore)

    n_iter_2, n_iter_min = max(int(0.22 * n), 1), max(int(0.06 * n), 1)
    size_decr = max(int(0.03 * n), 1)
    k = n_iter_2
    step = 2. * r
    x_adv = x_init.clone()
    grad, loss, acc = probe(x_adv, True)
    x_best, grad_best, loss_best = x_adv.clone(), grad.clone(), loss
    x_best_adv = x_adv.clone()
    loss_steps = torch.zeros(n, dtype=torch.float64)
    loss_best_last_check, reduced_last_check = loss_best, 1.
    record = dict(radius=r, steps=n, halvings=[], kept=-1, accuracy=acc)
    x_adv_old = x_adv.clone()
    counter3 = 0
    for i in range(n):
        grad2 = x_adv - x_adv_old
        x_adv_old = x_adv.clone()
        a = 0.75 if i > 0 else 1.0
        if norm == 'linf':
            x1 = clip(x_adv + step * torch.sign(grad), x0, norm, r)
        else:
            x1 = x_adv + step * grad / (torch.sqrt((grad**2).sum()) + 1e-12)
            x1 = clip(x1, x0, norm, r)
        x_adv = clip(x_adv + (x1 - x_adv) * a + grad2 * (1 - a), x0, norm, r)
        g, loss, avg_acc = probe(x_adv, i < n - 1)
        if g is not None:
            grad = g
        if avg_acc <= acc:
            x_best_adv = x_adv.clone()
            record.update(kept=i, accuracy=avg_acc)
        acc = min(acc, avg_acc)
        loss_steps[i] = loss
        if loss > loss_best:
            x_best, grad_best, loss_best = x_adv.clone(), grad.clone(), loss
        counter3 += 1
        if counter3 == k:
            t = sum(
                float(loss_steps[i - c] > loss_steps[i - c - 1])
                for c in range(k))
            fl_osc = float(t <= k * 0.75)
            fl_no_impr = (1. - reduced_last_check) * float(
                loss_best_last_check >= loss_best)
            fl_osc = max(fl_osc, fl_no_impr)
            reduced_last_check, loss_best_last_check = fl_osc, loss_best
            if fl_osc > 0:
                step /= 2.
                x_adv, grad = x_best.clone(), grad_best.clone()
                record['halvings'].append(i)
            counter3 = 0
            k = max(k - size_decr, n_iter_min)
        if acc == 0:
            break
    return x_best_adv, record


def apgd_by_hand(f: Callable,
                 x0: Tensor,
                 y: Tensor,
                 name: str,
                 norm: str,
                 eps: float,
                 n_iter: int,
                 start: Tensor,
                 ignore: int = 255,
                 weights=None) -> tuple:
    """SEA's ``apgd_largereps`` (L-inf) or one APGD run (L2) on one image:
    ``eps`` in pixels, ``start`` the random start (in the first ball).

    Returns:
        tuple: The adversarial image and each stage's record.
    """
    if norm == 'linf':
        n_iters = [int(c * n_iter) for c in [0.3, 0.3]]
        n_iters.append(n_iter - sum(n_iters))
        epss = [c * eps for c in [2, 1.5, 1]]
    else:
        n_iters, epss = [n_iter], [eps]
    x_init, records = start, []
    for inner_it, inner_eps in zip(n_iters, epss):
        x_init = clip(x_init, x0, norm, inner_eps)
        x_init, record = stage_by_hand(f, x0, y, name, norm, inner_eps,
                                       inner_it, x_init, ignore, weights)
        records.append(record)
    return x_init, records


def class_weights_by_hand(maps: List[np.ndarray],
                          classes: int,
                          ignore: int = 255) -> List[float]:
    """Inverse pixel counts normalised over the classes seen; an unseen
    class takes the rarest seen class's weight."""
    counts = [sum(int((m == c).sum()) for m in maps) for c in range(classes)]
    seen = {c: 1. / n for c, n in enumerate(counts) if n > 0}
    total = math.fsum(seen.values())
    rarest = max(seen.values())
    return [seen.get(c, rarest) / total for c in range(classes)]


def records_equal(a: List[Dict], b: List[Dict]) -> bool:
    """The stage records agree (accuracies to float rounding)."""
    keys = ('radius', 'steps', 'halvings', 'kept')
    return len(a) == len(b) and all(
        all(x[k] == y[k]
            for k in keys) and abs(x['accuracy'] - y['accuracy']) < 1e-9
        for x, y in zip(a, b))
