"""Randomised smoothing of a segmentor, certified per pixel: SegCertify
(Fischer, Baader and Vechev, ICML 2021, Algorithm 1).

Each pixel's class is the most frequent one over ``n0`` noisy copies of the
image; a further ``n`` copies count how often the base model gives it, and a
one-sided binomial test asks whether its probability exceeds ``tau``. The
tests of an image's pixels are corrected together (Holm or Bonferroni) at
level ``alpha``; a pixel whose test fails abstains. A pixel that does not
abstain keeps its class under every L2 perturbation of the image below
``sigma * Phi^-1(tau)`` (on the 0-1 scale), with probability ``1 - alpha``
for the whole image. The noise is Gaussian on the 0-1 scale, added to the
0-255 images before mmseg's normalisation, one independent draw per copy
from a generator seeded by the image (both models get the same draws).
"""
import zlib
from typing import Callable, Tuple

import numpy as np
import torch
from torch import Tensor

from ...errors import AnalysisError

#: The label of a pixel that abstains (outside every class, so mmseg's
#: ``IoUMetric`` counts it as wrong: in its true class's union only).
ABSTAIN = -1


def draw_generator(key: str, seed: int) -> torch.Generator:
    """The CPU generator of one image's draws: seeded by its key (its path
    under the data root) and ``seed``."""
    return torch.Generator().manual_seed(
        (zlib.crc32(str(key).encode()) + seed) % 2**63)


def noisy_copies(image: Tensor, sigma: float, count: int,
                 generator: torch.Generator) -> Tensor:
    """``count`` copies of a 0-255 image, each plus its own Gaussian draw
    of standard deviation ``sigma`` on the 0-1 scale (not clipped).

    Each copy's draw is one call of the generator, so the copies do not
    depend on how they are batched.

    Returns:
        Tensor: ``[count, *image.shape]`` on the image's device.
    """
    noise = torch.stack(
        [torch.randn(image.shape, generator=generator) for _ in range(count)])
    return image.float()[None] + (noise * (sigma * 255.)).to(image.device)


def base_labels(predict: Callable[[Tensor],
                                  Tensor], image: Tensor, sigma: float,
                count: int, generator: torch.Generator, batch: int) -> Tensor:
    """The base model's labels on ``count`` noisy copies, ``batch`` at a
    time: ``predict`` maps ``[b, 3, H, W]`` images to ``[b, C, h, w]``
    logits. Returns ``[count, h, w]`` class indices."""
    out = []
    for start in range(0, count, batch):
        copies = noisy_copies(image, sigma, min(batch, count - start),
                              generator)
        with torch.no_grad():
            out.append(predict(copies).argmax(1))
    return torch.cat(out)


def sample_counts(predict: Callable[[Tensor], Tensor], image: Tensor,
                  sigma: float, n0: int, n: int, generator: torch.Generator,
                  batch: int) -> Tuple[Tensor, Tensor]:
    """Each pixel's guessed class and how often the base model gives it.

    The ``n0`` selection draws come first from ``generator``, then the
    ``n`` counting draws, so that no draw is used twice.

    Returns:
        tuple: ``guess`` ``[h, w]`` (the most frequent class over the ``n0``
        copies, the lowest on ties) and ``counts`` ``[h, w]`` (of the ``n``
        copies, how many give ``guess``).
    """
    select = base_labels(predict, image, sigma, n0, generator, batch)
    classes = int(select.max()) + 1
    votes = torch.zeros((classes, *select.shape[1:]),
                        dtype=torch.long,
                        device=select.device)
    votes.scatter_add_(0, select, torch.ones_like(select))
    guess = votes.argmax(0)
    counts = torch.zeros_like(guess)
    for start in range(0, n, batch):
        labels = base_labels(predict, image, sigma, min(batch, n - start),
                             generator, batch)
        counts += (labels == guess).sum(0)
    return guess, counts


def binomial_pvalues(counts: np.ndarray, n: int, tau: float) -> np.ndarray:
    """One-sided p-values of ``H0: p <= tau`` for ``counts`` successes in
    ``n`` trials: ``P(Binomial(n, tau) >= counts)``, as
    ``scipy.stats.binomtest(k, n, tau, alternative='greater').pvalue``."""
    from scipy.stats import binom  # not on the plugin's import (0.2 s)
    counts = np.asarray(counts)
    if counts.size and (counts.min() < 0 or counts.max() > n):
        raise AnalysisError(f'counts must lie in [0, n={n}], got '
                            f'[{counts.min()}, {counts.max()}].')
    return binom.sf(counts - 1, n, tau)


def holm(pvalues: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down rejections at family-wise level ``alpha``: the
    ``i``-th smallest p-value (from 0) is rejected while every one up to it
    is at most ``alpha / (m - i)``."""
    p = np.asarray(pvalues, dtype=float).ravel()
    order = np.argsort(p, kind='stable')
    below = p[order] <= alpha / (p.size - np.arange(p.size))
    reject = np.zeros(p.size, dtype=bool)
    reject[order] = np.logical_and.accumulate(below)
    return reject.reshape(np.shape(pvalues))


def bonferroni(pvalues: np.ndarray, alpha: float) -> np.ndarray:
    """Bonferroni's rejections at family-wise level ``alpha``."""
    p = np.asarray(pvalues, dtype=float)
    return p <= alpha / max(p.size, 1)


CORRECT = dict(holm=holm, bonferroni=bonferroni)


def certify_pixels(guess: Tensor,
                   counts: Tensor,
                   n: int,
                   tau: float,
                   alpha: float,
                   correction: str = 'holm') -> Tensor:
    """The certified labels of one image: ``guess`` where the corrected
    test rejects ``p <= tau``, :data:`ABSTAIN` elsewhere."""
    if correction not in CORRECT:
        raise AnalysisError(f'correction {correction!r} is none of '
                            f'{tuple(CORRECT)}.')
    pvalues = binomial_pvalues(counts.cpu().numpy(), n, tau)
    reject = torch.from_numpy(CORRECT[correction](pvalues, alpha))
    return torch.where(reject.to(guess.device), guess, ABSTAIN)
