"""SEA's training attack, ``apgd_train`` of ``semseg/attacker.py`` in
nmndeep/Robust-Segmentation (commit f8ff8e6), transcribed line by line for
the settings its training script uses (``tools/train_rob_seg.py`` lines
302-315: ``norm="Linf"``, ``use_rs=True``, ``loss="ce-avg"``,
``track_loss=None``, ``early_stop=False``), written independently of
``mmseg_elliptical``'s APGD. Batched as SEA's: one step size, best point and
checkpoint state per image.

Changes, each marked where it applies:

- 0-255 images and eps in levels (SEA: 0-1 and eps / 255), so the clamps
  are to [0, 255];
- the random start is given (``x_init``, SEA line 295) instead of drawn
  (lines 288-294);
- labels use ``ignore`` (SEA requires -1, line 281; the transcription maps
  ``ignore`` to -1 first);
- SEA line 347 calls the loss with a third argument, ``weights``, which its
  ``'ce-avg'`` lambda (line 253) does not take (a TypeError as published;
  its training script also passes ``gpuu=``, which ``apgd_train`` does not
  take, and ``logger=None``, which line 305 calls on any ignored pixel):
  the loss is called with two;
- the L2 branch (lines 412-436) runs from the given start (SEA's random
  start, lines 292-294, is L-inf only);
- it also returns each image's halving iterations (for the tests);
- ``loss_steps`` (line 311) has the images' dtype (SEA: the default,
  float32): run in float64, float32 losses would tie where the package's
  do not.
"""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def ce_avg(x: Tensor, y: Tensor) -> Tensor:
    """SEA line 253, ``criterion_dict["ce-avg"]``."""
    return F.cross_entropy(x, y, reduction='none', ignore_index=-1)


def mask_ce_avg(pred: Tensor,
                target: Tensor,
                weights=None,
                reduction='none',
                ignore_index=-1) -> Tensor:
    """SEA lines 143-152, ``masked_cross_entropy``."""
    mask = pred.max(1)[1] == target
    mask = (target != ignore_index) * mask
    loss = F.cross_entropy(pred, target, reduction='none', ignore_index=-1)
    loss = mask.float().detach() * loss
    if reduction == 'mean':
        return loss.view(pred.shape[0], -1).mean(-1)
    return loss


#: SEA lines 251-257, for the losses the tests use (our names).
CRITERIA = {'apgd-ce': ce_avg, 'apgd-mce': mask_ce_avg}


def pixel_to_img_loss(loss: Tensor, mask_background=None) -> Tensor:
    """SEA lines 237-240."""
    if mask_background is not None:
        loss = mask_background * loss
    return loss.view(loss.shape[0], -1).mean(-1)


def check_oscillation(x, j, k, y5, k3=0.75):
    """SEA lines 243-248."""
    t = torch.zeros(x.shape[1]).to(x.device)
    for counter5 in range(k):
        t += (x[j - counter5] > x[j - counter5 - 1]).float()
    return (t <= k * k3 * torch.ones_like(t)).float()


def l2_norm(x: Tensor) -> Tensor:
    """AutoAttack's ``other_utils.L2_norm(x, keepdim=True)``: per image,
    ``[bs, 1, 1, 1]``."""
    z = (x**2).view(x.shape[0], -1).sum(-1).sqrt()
    return z.view(-1, *[1] * (len(x.shape) - 1))


def apgd_train(model: Callable[[Tensor], Tensor],
               x: Tensor,
               y: Tensor,
               norm: str,
               eps: float,
               n_iter: int,
               x_init: Tensor,
               loss: str = 'apgd-ce',
               ignore: int = 255,
               halvings: Optional[List[List[int]]] = None) -> tuple:
    """SEA's ``apgd_train`` (lines 260-571) on a batch.

    Args:
        model (callable): ``[bs, 3, H, W]`` 0-255 images to ``[bs, C, H, W]``
            logits.
        x (Tensor): The clean images; ``y`` (Tensor): ``[bs, H, W]`` labels.
        norm (str): ``'Linf'`` or ``'L2'``; ``eps`` in pixels.
        x_init (Tensor): The start (SEA line 295).
        loss (str): ``'apgd-ce'`` (SEA's ``'ce-avg'``) or ``'apgd-mce'``.
        halvings (list, optional): Filled with each image's iterations
            whose checkpoint halved the step.

    Returns:
        tuple: SEA's ``x_best, acc, loss_best, x_best_adv``.
    """
    y = torch.where(y == ignore, torch.full_like(y, -1), y)  # -1: ignored
    ignore_index = -1
    device = x.device
    ndims = len(x.shape) - 1
    bs = x.shape[0]
    x_adv = x_init.clone()  # line 297
    mask_background = y == ignore_index  # 302
    mask_background = 1 - mask_background.float()  # 306
    x_adv = x_adv.clamp(0.0, 255.0)  # 308
    x_best = x_adv.clone()
    x_best_adv = x_adv.clone()
    loss_steps = torch.zeros([n_iter, x.shape[0]],
                             device=device,
                             dtype=x.dtype)  # 311 (dtype: see above)
    criterion_indiv = CRITERIA[loss]  # 316
    track_loss_fn = criterion_indiv  # 317-319: track_loss=None
    n_iter_2 = max(int(0.22 * n_iter), 1)  # 324
    n_iter_min = max(int(0.06 * n_iter), 1)
    size_decr = max(int(0.03 * n_iter), 1)
    k = n_iter_2 + 0
    thr_decr = 0.75
    alpha = 2.0  # 329
    step_size = alpha * eps * torch.ones([x.shape[0], *[1] * ndims],
                                         device=device)  # 339
    counter3 = 0
    x_adv.requires_grad_()  # 342
    logits = model(x_adv)
    loss_indiv = criterion_indiv(logits, y)  # 347 (see the docstring)
    loss_indiv = pixel_to_img_loss(loss_indiv, mask_background)
    loss_ = loss_indiv.sum()
    grad = torch.autograd.grad(loss_, [x_adv])[0].detach()  # 350
    loss_indiv = track_loss_fn(logits, y)  # 359
    loss_indiv = pixel_to_img_loss(loss_indiv, mask_background)
    loss_ = loss_indiv.sum()
    grad_best = grad.clone()  # 365
    x_adv.detach_()
    loss_indiv.detach_()
    loss_.detach_()
    acc = logits.detach().max(1)[1] == y  # 370
    acc = acc.float().view(bs, -1).mean(-1)
    loss_best = loss_indiv.detach().clone()  # 377
    loss_best_last_check = loss_best.clone()
    reduced_last_check = torch.ones_like(loss_best)
    x_adv_old = x_adv.clone().detach()  # 383
    record: List[List[int]] = [[] for _ in range(bs)]

    for i in range(n_iter):  # 385
        x_adv = x_adv.detach()
        grad2 = x_adv - x_adv_old
        x_adv_old = x_adv.clone()
        a = 0.75 if i > 0 else 1.0  # 393
        if norm == 'Linf':  # 395-410
            x_adv_1 = x_adv + step_size * torch.sign(grad)
            x_adv_1 = torch.clamp(
                torch.min(torch.max(x_adv_1, x - eps), x + eps), 0.0, 255.0)
            x_adv_1 = torch.clamp(
                torch.min(
                    torch.max(x_adv + (x_adv_1 - x_adv) * a + grad2 * (1 - a),
                              x - eps), x + eps), 0.0, 255.0)
        elif norm == 'L2':  # 412-436
            x_adv_1 = x_adv + step_size * grad / (l2_norm(grad) + 1e-12)
            x_adv_1 = torch.clamp(
                x + (x_adv_1 - x) / (l2_norm(x_adv_1 - x) + 1e-12) *
                torch.min(eps * torch.ones_like(x), l2_norm(x_adv_1 - x)), 0.0,
                255.0)
            x_adv_1 = x_adv + (x_adv_1 - x_adv) * a + grad2 * (1 - a)
            x_adv_1 = torch.clamp(
                x + (x_adv_1 - x) / (l2_norm(x_adv_1 - x) + 1e-12) *
                torch.min(eps * torch.ones_like(x), l2_norm(x_adv_1 - x)), 0.0,
                255.0)
        x_adv = x_adv_1 + 0.0  # 456

        x_adv.requires_grad_()  # 459
        logits = model(x_adv)
        loss_indiv = criterion_indiv(logits, y)  # 462
        loss_indiv = pixel_to_img_loss(loss_indiv, mask_background)
        loss_ = loss_indiv.sum()
        if i < n_iter - 1:  # 467
            grad = torch.autograd.grad(loss_, [x_adv])[0].detach()
        loss_indiv = track_loss_fn(logits, y)  # 473
        loss_indiv = pixel_to_img_loss(loss_indiv, mask_background)
        loss_ = loss_indiv.sum()
        x_adv.detach_()
        loss_indiv.detach_()
        loss_.detach_()

        pred = logits.detach().max(1)[1] == y  # 485
        pred[y == ignore_index] = True
        avg_acc = pred.float().view(bs, -1).mean(-1)
        ind_pred = (avg_acc <= acc).nonzero().squeeze()
        acc = torch.min(acc, avg_acc)
        x_best_adv[ind_pred] = x_adv[ind_pred] + 0.0  # 494

        y1 = loss_indiv.detach().clone()  # 520
        loss_steps[i] = y1 + 0
        ind = (y1 > loss_best).nonzero().squeeze()
        x_best[ind] = x_adv[ind].clone()
        grad_best[ind] = grad[ind].clone()
        loss_best[ind] = y1[ind] + 0
        counter3 += 1
        if counter3 == k:  # 530
            fl_oscillation = check_oscillation(
                loss_steps, i, k, loss_best, k3=thr_decr)
            fl_reduce_no_impr = (1.0 - reduced_last_check) * (
                loss_best_last_check >= loss_best).float()
            fl_oscillation = torch.max(fl_oscillation, fl_reduce_no_impr)
            reduced_last_check = fl_oscillation.clone()
            loss_best_last_check = loss_best.clone()
            if fl_oscillation.sum() > 0:  # 542
                ind_fl_osc = (fl_oscillation > 0).nonzero().squeeze()
                step_size[ind_fl_osc] /= 2.0
                x_adv[ind_fl_osc] = x_best[ind_fl_osc].clone()
                grad[ind_fl_osc] = grad_best[ind_fl_osc].clone()
                for j in (fl_oscillation > 0).nonzero().flatten().tolist():
                    record[j].append(i)  # (for the tests)
            counter3 = 0  # 550
            k = max(k - size_decr, n_iter_min)
        # 568: early_stop=False, no break
    if halvings is not None:
        halvings[:] = record
    return x_best, acc, loss_best, x_best_adv  # 571


def per_image(model_of: Callable, images: List[Tensor], labels: List[Tensor],
              starts: List[Tensor], norm: str, eps: float, n_iter: int,
              loss: str) -> Dict[str, list]:
    """:func:`apgd_train` on each image alone (a batch of 1: SEA's
    per-image state makes it the batch's result); ``model_of(j)`` gives
    image ``j``'s ``[1, 3, H, W]`` to ``[1, C, H, W]`` function.

    Returns:
        dict: ``x_best`` (``[3, H, W]`` each) and ``halvings``.
    """
    out: Dict[str, list] = dict(x_best=[], halvings=[])
    for j, (x0, y, start) in enumerate(zip(images, labels, starts)):
        halvings: List[List[int]] = []
        x_best = apgd_train(
            model_of(j),
            x0[None],
            y[None],
            'Linf' if norm == 'linf' else 'L2',
            eps,
            n_iter,
            start[None],
            loss,
            halvings=halvings)[0]
        out['x_best'].append(x_best[0])
        out['halvings'].append(halvings[0])
    return out
