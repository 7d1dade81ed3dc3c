"""SegCertify written out again for the tests, independently of the
package: Fischer, Baader and Vechev (ICML 2021), Algorithm 1, as
``certify()`` of eth-sri/segmentation-smoothing
(``code/multiclassify_utils.py``) does it, pixel by pixel, with
``scipy.stats.binomtest`` (its ``binom_test`` is gone from scipy) and a
plain loop for Holm's and Bonferroni's corrections (its statsmodels
``multipletests``)."""
import zlib

import numpy as np
import torch
from mmseg.structures import SegDataSample
from scipy.stats import binomtest


def holm_loop(pvalues, alpha):
    """Holm's step-down procedure, one hypothesis at a time."""
    m = len(pvalues)
    reject = [False] * m
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        if pvalues[i] > alpha / (m - rank):
            break
        reject[i] = True
    return np.array(reject)


def segcertify(samples, n0, n, tau, alpha, correction='holm', abstain=-1):
    """The original's ``certify()``: ``samples`` ``[n0 + n, K]`` labels,
    the first ``n0`` pick each point's class, the other ``n`` count it.

    Returns:
        tuple: Certified labels ``[K]`` and the p-values ``[K]``.
    """
    samples = np.asarray(samples)
    assert samples.shape[0] == n0 + n
    classes, pvalues = [], []
    for k in range(samples.shape[1]):
        column = samples[:, k]
        votes = np.zeros(column.max() + 1)
        for i in range(n0):
            votes[column[i]] += 1
        c = int(np.argmax(votes))
        count = int(np.sum(column[n0:] == c))
        classes.append(c)
        pvalues.append(binomtest(count, n, tau, alternative='greater').pvalue)
    if correction == 'holm':
        reject = holm_loop(pvalues, alpha)
    else:
        reject = np.array(pvalues) <= alpha / len(pvalues)
    return np.where(reject, classes, abstain), np.array(pvalues)


@torch.no_grad()
def noisy_samples(model, image, sample, sigma, count, key, seed):
    """The base model's labels ``[count, H * W]`` on ``count`` noisy copies
    of a 0-255 image, one copy at a time: Gaussian noise of ``sigma`` on
    the 0-1 scale (``sigma * 255`` levels) before normalisation, each copy
    one draw of a generator seeded by ``crc32(key) + seed``."""
    gen = torch.Generator().manual_seed(
        (zlib.crc32(key.encode()) + seed) % 2**63)
    out = []
    for _ in range(count):
        x = image.float() + torch.randn(
            image.shape, generator=gen) * (
                sigma * 255)
        data = model.data_preprocessor(
            dict(
                inputs=[x],
                data_samples=[SegDataSample(metainfo=sample.metainfo)]), False)
        pred = model.predict(data['inputs'], data['data_samples'])[0]
        out.append(pred.seg_logits.data.argmax(0).flatten().numpy())
    return np.stack(out)
