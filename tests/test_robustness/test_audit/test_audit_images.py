"""The audit against partial masking (issue 54): the per-image check (a
count and an exact binomial test, pass / fail / inconclusive, 30 images at
least), the sweep that must fall eps after eps to the floor, the mIoU beside
the aAcc, and the verdict that names the image count and the preset."""
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from mmseg_elliptical.robustness.audit.images import ALLOWED, share_test
from mmseg_elliptical.robustness.audit.verdict import (CLEAN_VERDICT,
                                                       gradient_masking_audit,
                                                       preset_text)
from mmseg_elliptical.robustness.grid.areas import ImageAreas

PIXELS = 100


def tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X >= k) (upper) or P(X <= k) of a binomial, summed term by term
    in exact fractions."""
    p = Fraction(p).limit_denominator(1000)
    terms = range(k, n + 1) if upper else range(0, k + 1)
    return float(sum(comb(n, i) * p**i * (1 - p)**(n - i) for i in terms))


@pytest.mark.parametrize(
    'beaten, images, result',
    [
        (0, 30, 'pass'),
        (1, 30, 'pass'),  # issue 63: not above the share is a pass
        (6, 30, 'pass'),
        (7, 30, 'fail'),
        (0, 29, 'inconclusive'),
        (600, 2000, 'fail'),
        (3, 100, 'pass'),
        (10, 100, 'pass'),
        (18, 100, 'fail'),
    ])
def test_the_share_test_against_the_binomial_tails(beaten, images, result):
    got = share_test(beaten, images)
    assert got['result'] == result
    if images < 30:
        assert got['p_above'] is None and '30' in got['why']
        return
    above = tail(beaten, images, ALLOWED, True)
    below = tail(beaten, images, ALLOWED, False)
    assert got['p_above'] == pytest.approx(above, rel=1e-6)
    assert got['p_below'] == pytest.approx(below, rel=1e-6)
    want = 'fail' if above < 0.05 else 'pass'
    assert result == want


def partly_masked(n: int, stuck: int, seed: int = 0) -> tuple:
    """Cells of ``n`` images on ``stuck`` of which the white-box attacks
    make no progress (clean accuracy), beaten there by square and a
    transfer; on the rest white-box takes the images to near 0 and the
    black-box cells leave 40 %."""
    rng = np.random.default_rng(seed)
    clean = rng.integers(85, 96, n)
    white = np.where(np.arange(n) < stuck, clean, rng.integers(0, 3, n))
    black = np.where(
        np.arange(n) < stuck, clean - rng.integers(5, 20, n),
        rng.integers(30, 50, n))
    right = {
        'clean': clean,
        'pgd/linf/4/5': white,
        'pgd/linf/4/10': white,
        'pgd/linf/8/5': np.minimum(white, 1),
        'pgd/linf/255/5': np.zeros(n, int),
        'fgsm/linf/4/1': np.maximum(white, rng.integers(40, 60, n)),
        'square/linf/4/1000': black,
        'pgd@dot/linf/4/5': np.maximum(black, white - 1) + 5,
    }
    labelled = np.full(n, PIXELS)
    cells = {
        k: dict(aAcc=100 * v.sum() / labelled.sum())
        for k, v in right.items()
    }
    return cells, lambda k: (right[k], labelled) if k in right else None


def audit(cells, correct):
    return gradient_masking_audit(cells, correct, [4.], False, budget=[])


def check(got, name):
    return next(c for c in got['checks'] if c['check'] == name)


def test_a_subset_of_masked_images_fails_per_image_not_pooled():
    """The review's case, scaled: 30 % of the images stuck at their clean
    accuracy and beaten there by square and the transfer on every one of
    them. Pooled, the white-box worst case (about 27 %) is still below
    every black-box cell (above 30 %), so the pooled check passes; image by
    image it fails."""
    cells, correct = partly_masked(200, 60)
    got = audit(cells, correct)
    assert check(got, 'white-box beats black-box')['passed'] is True
    per_image = check(got, 'white-box beats black-box per image')
    assert per_image['passed'] is False
    row = per_image['rows'][0]
    assert (row['beaten'], row['images']) == (60, 200)
    assert row['cell'] == 'square/linf/4/1000'
    assert 'on 60 of 200 images' in per_image['detail']
    # the stuck images are also zero progress (issue 63)
    assert got['verdict'].startswith(
        'failed: white-box beats black-box per image, zero progress; 200 '
        'images, ')
    # an honest model: no image beaten, 200 images
    cells, correct = partly_masked(200, 0)
    got = audit(cells, correct)
    assert check(got, 'white-box beats black-box per image')['passed'] is True
    # without per-class areas, never the clean phrase (issue 63)
    assert got['verdict'] == (f'inconclusive: not checked: per class; 200 '
                              f'images, {preset_text()}')
    assert not got['verdict'].startswith(CLEAN_VERDICT)


def test_fewer_than_30_images_are_inconclusive():
    cells, correct = partly_masked(29, 0)
    got = audit(cells, correct)
    per_image = check(got, 'white-box beats black-box per image')
    assert per_image['passed'] is None and per_image['inconclusive']
    assert got['verdict'] == (
        'inconclusive: white-box beats black-box per image; not checked: '
        f'per class; 29 images, fewer than 30, {preset_text()}')
    # a failure is a failure on any number of images
    cells, correct = partly_masked(20, 20)
    assert audit(cells, correct)['verdict'] == (
        'failed: white-box beats black-box, zero progress; 20 images, '
        'fewer than 30, '
        f'{preset_text()}')


def sweep_cells(curve: dict, n: int = 40) -> tuple:
    """A swept series with the given pooled aAcc per eps (every image at
    that accuracy)."""
    labelled = np.full(n, PIXELS)
    right = {
        f'apgd-mce-bal/linf/{e:g}/100': np.full(n, v)
        for e, v in curve.items()
    }
    cells = {k: dict(aAcc=float(v[0])) for k, v in right.items()}
    return cells, lambda k: (right[k], labelled) if k in right else None


def test_a_sweep_that_rises_back_fails():
    cells, correct = sweep_cells({
        4: 70,
        8: 30,
        16: 5,
        32: 0,
        64: 1,
        128: 20,
        255: 40
    })
    got = audit(cells, correct)
    sweep = check(got, 'eps sweep')
    assert sweep['passed'] is False  # it reached 0 % at 32, then rose
    assert 'it rises from 1.00 to 20.00 at eps 64 -> 128' in sweep['detail']
    failed = [r['what'] for r in sweep['rows'] if not r['passed']]
    assert failed == [
        'eps 255', 'eps 64 -> 128', 'eps 128 -> 255', 'eps 255 per image'
    ]
    # a wiggle under the floor is no rise; the end at the floor passes
    cells, correct = sweep_cells({4: 70, 8: 30, 16: 5, 32: 0, 64: 1, 255: 0})
    assert check(audit(cells, correct), 'eps sweep')['passed'] is True
    # a rise above the floor fails, though the end is at the floor
    cells, correct = sweep_cells({4: 70, 8: 30, 16: 5, 32: 9, 64: 1, 255: 0})
    sweep = check(audit(cells, correct), 'eps sweep')
    assert sweep['passed'] is False
    assert [r['what'] for r in sweep['rows']
            if not r['passed']] == ['eps 16 -> 32']


def test_rows_carry_the_miou_beside_the_aacc():
    """Two classes per image: the rows' mIoU is that of the per-image
    minimum-accuracy choice, computed here by hand."""
    n = 40
    rng = np.random.default_rng(5)
    inter = {
        k: rng.integers(0, 40, (n, 2))
        for k in ('pgd/linf/4/5', 'segpgd/linf/4/5', 'square/linf/4/1000')
    }
    union = {k: v + rng.integers(10, 30, (n, 2)) for k, v in inter.items()}
    labelled = np.full(n, PIXELS)
    cells = {
        k: dict(aAcc=100 * v.sum() / labelled.sum())
        for k, v in inter.items()
    }

    def correct(k):
        return inter[k].sum(1), labelled, ImageAreas(inter[k], union[k])

    row = check(audit(cells, correct), 'white-box beats black-box')['rows'][0]
    white = ['pgd/linf/4/5', 'segpgd/linf/4/5']
    pick = [
        min(white, key=lambda k: (inter[k][i].sum(), white.index(k)))
        for i in range(n)
    ]
    i_sum = sum(inter[k][i] for i, k in enumerate(pick))
    u_sum = sum(union[k][i] for i, k in enumerate(pick))
    assert row['first_mIoU'] == pytest.approx(100 * np.mean(i_sum / u_sum))
    sq = 'square/linf/4/1000'
    assert row['second_mIoU'] == pytest.approx(
        100 * np.mean(inter[sq].sum(0) / union[sq].sum(0)))


def test_bpda_and_eot_give_the_robust_number_but_not_the_checks():
    """A masked model's BPDA cell is far below its white-box cells: the
    checks still fail (the gradient is masked), and the verdict reports the
    worst case with the remedies, the per-image minimum computed here."""
    cells, correct = partly_masked(40, 40)
    right = {k: correct(k)[0] for k in cells}
    rng = np.random.default_rng(9)
    bpda = rng.integers(0, 10, 40)
    eot = rng.integers(0, 10, 40)
    right['apgd-mce-bal-bpda/linf/4/100'] = bpda
    right['apgd-mce-bal-eot8/linf/4/100'] = eot
    labelled = np.full(40, PIXELS)
    cells = {
        k: dict(aAcc=100 * v.sum() / labelled.sum())
        for k, v in right.items()
    }
    got = audit(cells, lambda k: (right[k], labelled))
    assert check(got, 'white-box beats black-box')['passed'] is False
    white = np.minimum(right['pgd/linf/4/5'], right['pgd/linf/4/10'])
    white = np.minimum(white, right['fgsm/linf/4/1'])
    want = np.minimum(white, np.minimum(bpda, eot)).sum() / 40
    assert got['remedies']['aAcc'] == pytest.approx(want)
    assert got['remedies']['without'] == pytest.approx(white.sum() / 40)
    assert got['verdict'].endswith(
        f'; with BPDA and EOT the worst case at eps 4 is {want:.2f} % aAcc '
        f'(without: {white.sum() / 40:.2f})')
    assert 'remedy' not in str(got['budget'])


def test_remedy_cells_are_the_preset_attack_through_bpda_and_eot():
    from mmseg_elliptical.robustness.attacks.cells import Attack, AuditPreset
    from mmseg_elliptical.robustness.audit.cells import remedy_cells
    preset = AuditPreset(sweep_steps=4)
    swept = [
        Attack(
            'apgd-mce-bal',
            'linf',
            e,
            4,
            2.,
            adaptive=a,
            class_weights=(1., 2.)) for e in (4., 8.) for a in (False, True)
    ]
    other = Attack('pgd', 'linf', 4., 4, 1.)
    got = [c.key for c in remedy_cells([other, *swept], 4., preset, 3)]
    assert got == [
        'apgd-mce-bal-bpda/linf/4/4', 'apgd-mce-bal-adaptive-bpda/linf/4/4',
        'apgd-mce-bal-eot3/linf/4/4', 'apgd-mce-bal-adaptive-eot3/linf/4/4'
    ]
    with pytest.raises(Exception, match='eot 0 must be >= 1'):
        Attack('pgd', 'linf', 4., 4, 1., eot=0)


def test_the_report_says_inconclusive():
    from mmseg_elliptical.robustness.audit.report import audit_markdown
    cells, correct = partly_masked(29, 0)
    lines = audit_markdown({'m': {'audit': audit(cells, correct)}})
    row = next(r for r in lines[3].splitlines() if 'per image' in r)
    assert '| inconclusive |' in row and 'fewer than the 30' in row
    assert lines[-1].startswith('- m: inconclusive: white-box beats '
                                'black-box per image; not checked: per '
                                'class; 29 images, fewer ')
