"""Square Attack (Andriushchenko et al., ECCV 2020) adapted to segmentation.

A query attack: it reads only the model's outputs, never a gradient, so it
is the audit's black-box leg against gradient masking. L-inf: the
perturbation starts at vertical stripes of +-eps (one sign per channel and
column; at 0 when the stripes do not beat the clean image) and each query
redraws one square window of it, one sign per channel, at +-eps; the
window's side follows the original schedule of ``p`` (the fraction of the
image it covers, halved at fixed fractions of the queries). A query is kept
when it lowers the image's pixel accuracy over its labelled pixels, or keeps
it and raises the masked cross-entropy (over the pixels still classified
right, SEA's MCE); so the result is never more accurate than the clean
image. Each
image draws from its own generator, seeded by its path and the attack's
seed, as the random starts of the gradient attacks. Cells
``square/linf/EPS/QUERIES``: :class:`~.attacks.Attack`'s ``steps`` are the
queries, one forward per query and image (and two for the start).
"""
import math
import zlib
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import AnalysisError
from .cells import Attack

#: The original code's ``p_init`` for L-inf: the first windows cover 5 %.
P_INIT = 0.05
#: ``(queries done, in 1/10000 of all, up to; divisor of p)``: the
#: original schedule.
SCHEDULE = ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32),
            (4000, 64), (6000, 128), (8000, 256), (10000, 512))


def window_side(query: int, queries: int, height: int, width: int) -> int:
    """The side of the square redrawn at ``query`` (0-based) of
    ``queries``: ``round(sqrt(p * H * W))``, at least 1 and below the
    image's smaller side (the original's ``p_selection``)."""
    done = int(query / queries * 10000)
    divisor = next(d for f, d in SCHEDULE if done <= f)
    side = int(round(math.sqrt(P_INIT / divisor * height * width)))
    return max(1, min(side, min(height, width) - 1))


def accuracy_and_mce(logits: Tensor, labels: Tensor,
                     ignore_index: int) -> Tuple[int, float]:
    """Pixels classified right, and the masked cross-entropy (mean over the
    labelled pixels of the CE of those classified right) of one image."""
    valid = labels != ignore_index
    target = torch.where(valid, labels, 0)
    right = (logits.argmax(0) == target) & valid
    ce = F.cross_entropy(
        logits[None].float(), target[None], reduction='none')[0]
    mce = (ce * right).sum() / valid.sum().clamp_min(1)
    return int(right.sum()), float(mce)


def better(new: Tuple[int, float], old: Tuple[int, float]) -> bool:
    """Fewer pixels right, or as many and a higher masked CE."""
    return new[0] < old[0] or (new[0] == old[0] and new[1] > old[1])


def generator_of(attack: Attack, key) -> torch.Generator:
    """The image's generator (its path and the attack's seed)."""
    seed = (zlib.crc32(str(key).encode()) + attack.seed) % 2**63
    return torch.Generator().manual_seed(seed)


def signs(gen: torch.Generator, shape: Sequence[int]) -> Tensor:
    """Uniform -1 / +1 of ``shape``."""
    return torch.randint(0, 2, tuple(shape), generator=gen).float() * 2 - 1


@torch.no_grad()
def square_perturb(model,
                   images: Sequence[Tensor],
                   samples: List,
                   attack: Attack,
                   ignore_index: int = 255,
                   forward: Optional[Callable[[List[Tensor]],
                                              List[Tensor]]] = None,
                   labels: Optional[List[Tensor]] = None,
                   start_keys: Optional[Sequence[str]] = None) -> List[Tensor]:
    """The Square Attack's images of a batch (arguments as
    :func:`~.pgd.perturb` hands them over:
    float images on the model's device, ``forward``, ``labels`` and
    ``start_keys`` given; ``attack.steps`` queries, L-inf only, no
    gradient).

    Returns:
        list[Tensor]: The float images: each pixel moved by 0 or +-eps
        (clamped to [0, 255]).
    """
    if attack.norm != 'linf' or attack.adaptive:
        raise AnalysisError('The square attack is L-inf and reads outputs '
                            'only: use --norm linf, without --adaptive.')
    x0 = list(images)
    gens = [generator_of(attack, k) for k in start_keys]
    eps = float(attack.eps)
    deltas = [
        eps * signs(g, (x.shape[0], 1, x.shape[2])).expand_as(x).to(x)
        for x, g in zip(x0, gens)
    ]
    xs = [(x + d).clamp(0, 255) for x, d in zip(x0, deltas)]
    scores = [
        accuracy_and_mce(lg, lb, ignore_index)
        for lg, lb in zip(forward(xs), labels)
    ]
    # The stripes are kept only when they beat the clean image: the result
    # is never more accurate than the clean image.
    for i, clean in enumerate(
            accuracy_and_mce(lg, lb, ignore_index)
            for lg, lb in zip(forward(x0), labels)):
        if not better(scores[i], clean):
            scores[i], deltas[i], xs[i] = clean, torch.zeros_like(x0[i]), x0[i]
    for q in range(attack.steps):
        trial = []
        for x, d, g in zip(x0, deltas, gens):
            c, h, w = x.shape
            s = window_side(q, attack.steps, h, w)
            top = int(torch.randint(0, h - s + 1, (), generator=g))
            left = int(torch.randint(0, w - s + 1, (), generator=g))
            d = d.clone()
            d[:, top:top + s, left:left + s] = eps * signs(g, (c, 1, 1)).to(d)
            trial.append(d)
        cand = [(x + d).clamp(0, 255) for x, d in zip(x0, trial)]
        found = [
            accuracy_and_mce(lg, lb, ignore_index)
            for lg, lb in zip(forward(cand), labels)
        ]
        for i, score in enumerate(found):
            if better(score, scores[i]):
                scores[i], deltas[i], xs[i] = score, trial[i], cand[i]
    return xs
