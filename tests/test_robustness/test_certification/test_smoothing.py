"""SegCertify's pieces against scipy and a transcription of the original:
the binomial p-values, Holm and Bonferroni, the draws (independent per
copy, the n0 selection draws apart from the n counting ones) and a
simulation of the false-certification rate."""
import numpy as np
import pytest
import torch
from scipy.stats import binomtest, norm
from segcertify_oracle import holm_loop, segcertify

from mmseg_elliptical.errors import AnalysisError
from mmseg_elliptical.robustness.certification import smoothing
from mmseg_elliptical.robustness.certification.cells import (
    Certification, certification_cells)


@pytest.mark.parametrize('n,tau', [(1, 0.6), (20, 0.75), (100, 0.9),
                                   (517, 0.99)])
def test_pvalues_equal_scipy_binomtest(n, tau):
    counts = np.arange(n + 1)
    want = [binomtest(k, n, tau, alternative='greater').pvalue for k in counts]
    np.testing.assert_allclose(
        smoothing.binomial_pvalues(counts, n, tau),
        want,
        rtol=1e-10,
        atol=1e-300)


def test_pvalues_refuse_counts_outside_the_trials():
    with pytest.raises(AnalysisError, match=r'\[0, n=10\]'):
        smoothing.binomial_pvalues(np.array([3, 11]), 10, 0.8)


def test_holm_and_bonferroni_equal_the_loops():
    rng = np.random.default_rng(0)
    for trial in range(50):
        m = int(rng.integers(1, 40))
        # ties and p-values at the thresholds, as discrete tests give
        p = rng.choice([0., 1e-4, 2.5e-3, 0.01, 0.05 /
                        3, 0.2, 1.], size=m) if trial % 2 else rng.random(m)**4
        alpha = 0.05
        np.testing.assert_array_equal(
            smoothing.holm(p, alpha), holm_loop(list(p), alpha))
        np.testing.assert_array_equal(
            smoothing.bonferroni(p, alpha), p <= alpha / m)
    # Holm rejects more than Bonferroni on this family
    p = np.array([0.01, 0.02, 0.03])
    assert smoothing.holm(p, 0.06).all()
    assert smoothing.bonferroni(p, 0.06).tolist() == [True, True, False]


def test_certified_labels_equal_the_original_certify():
    rng = np.random.default_rng(1)
    n0, n = 5, 40
    truth = rng.integers(0, 3, 64)
    agree = rng.random(64) * 0.4 + 0.6  # per point, P(label == truth)
    noisy = np.where(
        rng.random((n0 + n, 64)) < agree, truth,
        rng.integers(0, 3, (n0 + n, 64)))
    for correction in ('holm', 'bonferroni'):
        want, _ = segcertify(noisy, n0, n, 0.7, 0.01, correction)
        votes = np.stack([(noisy[:n0] == c).sum(0) for c in range(3)])
        guess = torch.from_numpy(votes.argmax(0))
        counts = torch.from_numpy((noisy[n0:] == votes.argmax(0)).sum(0))
        got = smoothing.certify_pixels(guess, counts, n, 0.7, 0.01, correction)
        np.testing.assert_array_equal(got.numpy(), want)
        assert (want == -1).any() and (want != -1).any()


class Spy:
    """A base model on ``[b, 3, H, W]`` copies of a zero image: class 0
    where the first channel's noise is below ``Phi^-1(p) * sigma``, else
    class 1, so each pixel gives class 0 with probability ``p``. Keeps
    every copy it saw."""

    def __init__(self, p: float, sigma: float) -> None:
        self.cut = norm.ppf(p) * sigma * 255
        self.seen = []

    def __call__(self, copies):
        self.seen.append(copies.clone())
        one = (copies[:, 0] >= self.cut).long()
        return torch.stack([1 - one, one], 1).float()


def test_draws_differ_within_a_batch_and_ignore_the_batching():
    image = torch.full((3, 4, 5), 100.)
    copies = smoothing.noisy_copies(image, 0.25, 6,
                                    smoothing.draw_generator('a.png', 0))
    noise = (copies - image).flatten(1)
    assert torch.cdist(noise, noise).add(torch.eye(6) * 1e9).min() > 1
    assert abs(noise.std().item() / 255 - 0.25) < 0.03  # sigma on 0-1
    again = torch.cat([
        smoothing.noisy_copies(image, 0.25, k, gen)
        for gen in [smoothing.draw_generator('a.png', 0)] for k in (2, 3, 1)
    ])
    torch.testing.assert_close(again, copies, rtol=0, atol=0)
    other = smoothing.noisy_copies(image, 0.25, 6,
                                   smoothing.draw_generator('b.png', 0))
    assert not torch.allclose(other, copies)


@pytest.mark.parametrize('batch', [1, 4, 64])
def test_counts_use_exactly_n_trials_apart_from_the_n0(batch):
    image = torch.zeros(3, 3, 3)
    spy = Spy(0.7, 0.5)
    guess, counts = smoothing.sample_counts(spy, image, 0.5, 7, 23,
                                            smoothing.draw_generator('x', 3),
                                            batch)
    seen = torch.cat(spy.seen)
    assert seen.shape[0] == 7 + 23 and max(len(s) for s in spy.seen) <= batch
    flat = seen.flatten(1)  # no copy is used twice (selection and count)
    assert torch.cdist(flat, flat).add(torch.eye(30) * 1e9).min() > 1
    labels = (seen[:, 0] >= spy.cut).long()
    votes = torch.stack([(labels[:7] == c).sum(0) for c in (0, 1)])
    torch.testing.assert_close(guess, votes.argmax(0))
    torch.testing.assert_close(counts, (labels[7:] == guess).sum(0))
    assert counts.max() <= 23
    # always the same class: every one of the n trials counts
    _, full = smoothing.sample_counts(lambda x: torch.ones(len(x), 2, 3, 3),
                                      image, 0.5, 7, 23,
                                      smoothing.draw_generator('x', 3), batch)
    assert (full == 23).all()


def test_false_certification_rate_is_at_most_alpha():
    """Every pixel's top class has probability just below tau: a pixel that
    does not abstain is a false certificate, and the chance that an image
    has one must be at most alpha (Holm's family-wise guarantee). Both
    corrections are tested; an uncorrected test would certify some pixel
    of most images; at a probability above tau most pixels certify."""
    tau, alpha, n0, n, sigma, images = 0.8, 0.1, 5, 60, 0.5, 300
    image = torch.zeros(3, 4, 4)
    for correction in ('holm', 'bonferroni'):
        wrong = 0
        for i in range(images):
            guess, counts = smoothing.sample_counts(
                Spy(tau - 0.01, sigma), image, sigma, n0, n,
                smoothing.draw_generator(f'img{i}', 0), 64)
            labels = smoothing.certify_pixels(guess, counts, n, tau, alpha,
                                              correction)
            wrong += bool((labels != smoothing.ABSTAIN).any())
        # the rate is at most alpha unless this is very unlikely
        assert binomtest(
            wrong, images, alpha, alternative='greater').pvalue > 1e-3, wrong
    guess, counts = smoothing.sample_counts(
        Spy(0.97, sigma), image, sigma, n0, n,
        smoothing.draw_generator('img', 0), 64)
    labels = smoothing.certify_pixels(guess, counts, n, tau, alpha)
    assert (labels == 0).float().mean() > 0.8


def test_cells_radius_keys_and_checks():
    cells = certification_cells([0.25, 0.5], [0.75, 0.95],
                                ['holm', 'bonferroni'])
    assert len(cells) == 8 and len({c.key for c in cells}) == 8
    assert cells[0].key == 'certify/0.25/0.75/holm'
    for c in cells:
        assert c.radius == pytest.approx(c.sigma * norm.ppf(c.tau), 1e-12)
    assert cells[0].draws == cells[3].draws != cells[4].draws
    assert certification_cells([0.25, 0.25],
                               [0.9, 0.9]) == [Certification(0.25, 0.9)]
    for bad, what in ((dict(sigma=0.), 'sigma'), (dict(tau=0.5), 'tau'),
                      (dict(tau=1.), 'tau'), (dict(correction='bh'), 'bh'),
                      (dict(n=0), 'n 0'), (dict(alpha=1.), 'alpha')):
        with pytest.raises(AnalysisError, match=what):
            Certification(**{**dict(sigma=0.25, tau=0.9), **bad})
    with pytest.raises(AnalysisError, match='none of'):
        smoothing.certify_pixels(
            torch.zeros(2), torch.zeros(2), 3, 0.6, 0.1, 'bh')
