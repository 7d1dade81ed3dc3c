"""The per-image losses of SEA's APGD attacks (Croce, Singh and Hein, ECCV
2024), knowing nothing of loops.

Each takes one image's ``[C, H, W]`` logits and ``[H, W]`` labels and gives
the mean, over the image's labelled pixels (label not ``ignore_index``), of
a per-pixel loss; an ignored pixel never counts. SEA divides by every pixel
of the image instead: a positive factor per image, which changes neither the
sign of a gradient, nor its direction, nor the order of two losses of the
same image. docs/evidence.md gives the definitions.
"""
from typing import Callable, Dict, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import AnalysisError

#: Smallest mixture probability inside JS's log (a softmax that underflows
#: to 0 would give 0 x log 0).
TINY = 1e-30


def labelled_mean(per_pixel: Tensor, valid: Tensor) -> Tensor:
    """The mean of ``per_pixel`` over the ``valid`` pixels (0 without)."""
    return (per_pixel * valid).sum() / valid.sum().clamp_min(1)


def safe_labels(labels: Tensor, ignore_index: int) -> tuple:
    """The labelled pixels, and the labels with ignored ones set to 0."""
    valid = labels != ignore_index
    return valid, torch.where(valid, labels, 0)


def cross_entropy(logits: Tensor,
                  labels: Tensor,
                  ignore_index: int = 255,
                  weights: Optional[Tensor] = None) -> Tensor:
    """Plain cross-entropy: the loss APGD's step-size control tracks in
    evaluation, and ``apgd-ce``'s (SEA's training attack's ``'ce-avg'``)."""
    valid, target = safe_labels(labels, ignore_index)
    ce = F.cross_entropy(logits[None], target[None], reduction='none')[0]
    return labelled_mean(ce, valid)


def masked_cross_entropy(logits: Tensor,
                         labels: Tensor,
                         ignore_index: int = 255,
                         weights: Optional[Tensor] = None) -> Tensor:
    """Cross-entropy over the pixels still classified right (SEA's MCE);
    with ``weights`` (``[C]``) each pixel's term is weighted by its
    class's weight (MCE-Bal)."""
    valid, target = safe_labels(labels, ignore_index)
    ce = F.cross_entropy(logits[None], target[None], reduction='none')[0]
    if weights is not None:
        ce = ce * weights.to(ce)[target]
    right = logits.detach().argmax(0) == target
    return labelled_mean(ce * right, valid)


def jensen_shannon(logits: Tensor,
                   labels: Tensor,
                   ignore_index: int = 255,
                   weights: Optional[Tensor] = None) -> Tensor:
    """Jensen-Shannon divergence between the softmax and the one-hot label,
    summed over the classes (SEA's JS)."""
    valid, target = safe_labels(labels, ignore_index)
    p = logits.softmax(0)
    q = F.one_hot(target, p.shape[0]).permute(2, 0, 1).to(p)
    log_m = ((p + q) / 2).clamp_min(TINY).log()
    kl_p = torch.xlogy(p, p) - p * log_m
    kl_q = torch.xlogy(q, q) - q * log_m
    return labelled_mean(((kl_p + kl_q) / 2).sum(0), valid)


def masked_margin(logits: Tensor,
                  labels: Tensor,
                  ignore_index: int = 255,
                  weights: Optional[Tensor] = None) -> Tensor:
    """The DLR margin loss (Croce & Hein, ICML 2020) over the pixels still
    classified right: ``-(z_y - max_{j != y} z_j) / (z_1 - z_3)`` with
    ``z_1 >= z_2 >= z_3`` a pixel's largest logits. It reads logits, not
    a softmax, and does not change when every logit is scaled, so a logit
    temperature that saturates the softmax (and underflows the
    cross-entropy's gradient to 0) leaves its gradient as it was.

    Raises:
        AnalysisError: Fewer than 3 classes (no third logit).
    """
    if logits.shape[0] < 3:
        raise AnalysisError(
            f'apgd-dlr needs 3 or more classes for its margin loss (it '
            f'divides by the largest logit minus the third), not '
            f'{logits.shape[0]}: use another APGD loss.')
    valid, target = safe_labels(labels, ignore_index)
    true = logits.gather(0, target[None])[0]
    others = logits.scatter(0, target[None], float('-inf'))
    top = logits.topk(3, dim=0).values
    dlr = -(true - others.max(0).values) / (top[0] - top[2] + 1e-12)
    right = logits.detach().argmax(0) == target
    return labelled_mean(dlr * right, valid)


#: Each APGD attack's loss (``apgd-mce-bal`` also needs class weights):
#: SEA's evaluation losses, ``apgd-ce`` its training attack's (its
#: ``'ce-avg'``), and ``apgd-dlr`` the margin loss for saturated logits.
LOSSES: Dict[str, Callable] = {
    'apgd-mce': masked_cross_entropy,
    'apgd-mce-bal': masked_cross_entropy,
    'apgd-js': jensen_shannon,
    'apgd-ce': cross_entropy,
    'apgd-dlr': masked_margin,
}
#: The attacks whose loss weights each class (they need class weights).
BALANCED = ('apgd-mce-bal', )


def pixel_accuracy(logits: Tensor,
                   labels: Tensor,
                   ignore_index: int = 255) -> float:
    """The fraction of an image's labelled pixels classified right (0
    without labelled pixels)."""
    valid, target = safe_labels(labels, ignore_index)
    right = (logits.detach().argmax(0) == target) & valid
    return right.sum().item() / max(valid.sum().item(), 1)


def inverse_frequency(counts: Sequence[int]) -> list:
    """Class weights from pixel counts: each class's inverse count,
    normalised to sum to 1 over the classes seen; a class never seen takes
    the weight of the rarest class seen.

    Args:
        counts (Sequence[int]): Pixels of each class (at least one > 0).

    Returns:
        list[float]: One weight per class.
    """
    inverse = [1 / c for c in counts if c > 0]
    total, rarest = sum(inverse), max(inverse)
    return [(1 / c if c > 0 else rarest) / total for c in counts]
