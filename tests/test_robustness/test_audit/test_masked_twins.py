"""The subtler masked models of tests/masking.py (issue 54) on the demo
model (random weights, the clean prediction as labels, 64 x 64 images):
each defeats a plain white-box attack without a zero gradient everywhere,
the audit catches it from its own cells (square, no transfer from its own
weights), and BPDA or the margin loss brings the attack back to what it does
to the honest twin. EOT is checked as the expectation of the loss over the
random twins' draws; what it reaches on a trained randomised twin, and why
the honest twin's worst case is not its target, is in docs/evidence.md."""
import copy
from functools import partial

import numpy as np
import pytest
import torch
from builders import DEMO_ELLIPTICAL, seg_samples
from masking import audit_of_counts, correct_pixels, masked_path

from mmseg_elliptical.robustness.attacks import remedies
from mmseg_elliptical.robustness.attacks.pgd import (Attack, image_loss,
                                                     perturb, seg_logits)

TWINS = dict(
    quantised=dict(data_preprocessor=dict(type='QuantisingPreProcessor')),
    shattered=dict(data_preprocessor=dict(type='ShatteringPreProcessor')),
    subset=dict(
        data_preprocessor=dict(type='SubsetQuantisingPreProcessor',
                               share=0.3)),
    shifted=dict(data_preprocessor=dict(type='ShiftingPreProcessor', shift=2)),
    rolled=dict(type='RandomShiftEncoderDecoder', shift=4),
    hot=dict(type='HotEncoderDecoder', temperature=1e8),
    reversed=dict(data_preprocessor=dict(type='ReversingPreProcessor')))


@pytest.fixture(scope='module')
def twins(single_thread):
    """The honest demo model and its masked twins (the same weights)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(DEMO_ELLIPTICAL).model
    torch.manual_seed(0)
    honest = MODELS.build(copy.deepcopy(cfg))
    honest.init_weights()
    out = dict(honest=honest.eval())
    for name, change in TWINS.items():
        model = copy.deepcopy(cfg)
        pre = change.get('data_preprocessor', {})
        model.data_preprocessor.update(pre)
        model.update({
            k: v
            for k, v in change.items() if k != 'data_preprocessor'
        })
        out[name] = MODELS.build(model)
        out[name].load_state_dict(honest.state_dict())
        out[name].eval()
    return out


def batch(n: int, seed: int = 3):
    """``n`` random images and their samples, labelled with the honest
    model's clean prediction (set by :func:`labelled`)."""
    gen = torch.Generator().manual_seed(seed)
    images = [torch.rand(3, 64, 64, generator=gen) * 255 for _ in range(n)]
    samples = seg_samples(n, 64, 64, num_classes=5)
    for i, s in enumerate(samples):
        s.set_metainfo(dict(img_path=f'scene{i}.png'))
    return images, samples


def labelled(honest, images, samples):
    with torch.no_grad():
        for s, lg in zip(samples, seg_logits(honest, images, samples)):
            s.gt_sem_seg.data = lg.argmax(0)[None]
    return [s.gt_sem_seg.data[0] for s in samples]


def attacked(model, images, samples, labels, **kwargs) -> np.ndarray:
    name = kwargs.pop('name', 'pgd')
    steps = kwargs.pop('steps', 10)
    step = kwargs.pop('step_size', 2.)
    xs = perturb(model, images, samples,
                 Attack(name, 'linf', 8, steps, step, **kwargs))
    return correct_pixels(model, xs, samples, labels)


def own_cells(model, images, samples, labels) -> dict:
    """``model``'s correct pixels per image at its own cells: clean, PGD (10
    steps of 2 levels) and square (50 queries) at 8 levels."""
    return {
        'clean':
        correct_pixels(model, images, samples, labels),
        'pgd/linf/8/10':
        attacked(model, images, samples, labels),
        'square/linf/8/50':
        attacked(
            model,
            images,
            samples,
            labels,
            name='square',
            steps=50,
            step_size=1.)
    }


def test_bpda_differentiates_the_honest_model_at_the_transformed_image(twins):
    """BPDA's gradient on the quantised and shattered twins is the honest
    model's gradient at the image the twin sees (the oracle: the honest
    model differentiated at the rounded image)."""
    images, samples = batch(2)
    for name in ('quantised', 'shattered'):
        pre = twins[name].data_preprocessor
        seen = [
            pre(dict(inputs=[x], data_samples=[s]), False)
            for x, s in zip(images, samples)
        ]
        mean, std = pre.mean[:, 0, 0], pre.std[:, 0, 0]
        back = [
            (d['inputs'][0] * std[:, None, None] + mean[:, None, None]).flip(0)
            for d in seen
        ]  # undo normalisation and BGR->RGB
        xs = [x.clone().requires_grad_() for x in images]
        got = remedies.bpda_logits(twins[name], xs, samples)
        plain = seg_logits(twins[name], images, samples)
        leaves = [b.clone().requires_grad_() for b in back]
        want = seg_logits(twins['honest'], leaves, samples)
        for g, p in zip(got, plain):
            torch.testing.assert_close(g.detach(), p.detach())
        loss = sum(lg.logsumexp(0).sum() for lg in got)
        g_got = torch.autograd.grad(loss, xs)
        g_want = torch.autograd.grad(
            sum(lg.logsumexp(0).sum() for lg in want), leaves)
        for a, b in zip(g_got, g_want):
            assert a.abs().sum() > 0
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)


def test_shattered_gradients_are_nonzero_but_lead_nowhere(twins):
    images, samples = batch(4)
    labels = labelled(twins['honest'], images, samples)
    x = images[0].clone().requires_grad_()
    (lg, ) = seg_logits(twins['shattered'], [x], samples[:1])
    (grad, ) = torch.autograd.grad(lg.logsumexp(0).sum(), x)
    assert (grad != 0).float().mean() > 0.9  # not a zero gradient
    clean = correct_pixels(twins['shattered'], images, samples, labels).sum()
    plain = attacked(twins['shattered'], images, samples, labels).sum()
    honest = attacked(twins['honest'], images, samples, labels).sum()
    bpda = attacked(
        twins['shattered'], images, samples, labels, bpda=True).sum()
    pixels = 4 * 64 * 64
    assert plain > clean - 0.1 * pixels  # PGD barely moves it
    assert abs(bpda - honest) < 0.05 * pixels, (bpda, honest)


@pytest.mark.parametrize(
    'name, queries, remedy, against',
    [
        ('quantised', 100, dict(bpda=True), ('pgd', 'apgd-mce', 'apgd-dlr')),
        ('shattered', 300, dict(bpda=True), ('pgd', 'apgd-mce', 'apgd-dlr')),
        ('hot', 100, dict(), ('apgd-dlr', )),  # the remedy: the margin loss
    ])
def test_the_remedy_brings_the_twin_to_the_honest_worst_case(
        twins, name, queries, remedy, against):
    """PGD and APGD-MCE leave the twin near its clean accuracy. With BPDA,
    PGD takes the quantised and shattered twins where it takes the honest
    one, and their worst case over PGD, APGD-MCE and APGD-DLR comes within
    3 % of the pixels of the honest twin's (from about 90 %; a rounded
    image moves by whole levels of 8.2, so APGD's step-size search sees
    less than on the honest twin); the margin loss takes the hot twin where
    it takes the honest one (the honest twin's PGD goes lower on this random
    model, a cross-entropy the hot twin's saturated softmax hides: no
    remedy here recovers it, docs/evidence.md)."""
    images, samples = batch(4)
    labels = labelled(twins['honest'], images, samples)
    pixels = 4 * 64 * 64
    clean = correct_pixels(twins[name], images, samples, labels).sum()
    right = {
        f'{a}/linf/8/10':
        attacked(twins[name], images, samples, labels, name=a)
        for a in ('pgd', 'apgd-mce')
    }
    for left in right.values():
        assert left.sum() > clean - 0.1 * pixels, (left.sum(), clean)
    for eps in (32, 255):  # the sweep, the step scaled with eps
        xs = perturb(twins[name], images, samples,
                     Attack('pgd', 'linf', eps, 10, eps / 4))
        right[f'pgd/linf/{eps}/10'] = correct_pixels(twins[name], xs, samples,
                                                     labels)
    # its own cells fail the audit (no transfer): the square attack beats
    # the white-box cells, or the sweep stops above the floor
    right[f'square/linf/8/{queries}'] = attacked(
        twins[name],
        images,
        samples,
        labels,
        name='square',
        steps=queries,
        step_size=1.)
    got = audit_of_counts(right, np.full(4, 64 * 64), [8.])
    failed = [c['check'] for c in got['checks'] if c['passed'] is False]
    assert failed and set(failed) <= {
        'eps sweep', 'white-box beats black-box'
    }, got['verdict']
    honest, fixed = (np.array([
        attacked(twins[model], images, samples, labels, name=a, **kw)
        for a in against
    ]) for model, kw in (('honest', {}), (name, remedy)))
    if remedy:  # BPDA: the same attack as on the honest twin
        assert abs(fixed[0].sum() - honest[0].sum()) < 0.01 * pixels
    worst, honest_worst = fixed.min(0).sum(), honest.min(0).sum()
    assert abs(worst - honest_worst) < 0.03 * pixels, (worst, honest_worst)


def test_eot_takes_the_mean_of_its_draws_losses(twins):
    """EOT stacks the logits of as many draws of the shifting twin (drawn
    here one by one from the same generator state) along the height; with
    the labels tiled, an image's loss is the mean of the draws' losses (the
    expectation of the loss), which is not the loss of their mean logits."""
    images, samples = batch(2)
    labels = labelled(twins['honest'], images, samples)
    model = twins['shifted']
    state = model.data_preprocessor.generator.get_state()
    with torch.no_grad():
        got = remedies.eot_forward(lambda xs: seg_logits(model, xs, samples),
                                   5)(
                                       images)
        model.data_preprocessor.generator.set_state(state)
        draws = [seg_logits(model, images, samples) for _ in range(5)]
    tiled = remedies.eot_labels(labels, 5)
    for name in ('pgd', 'segpgd'):
        attack = Attack(name, 'linf', 8, 10, 2.)
        for i, (g, lb) in enumerate(zip(got, tiled)):
            assert g.shape == (5, 5 * 64, 64) and lb.shape == (5 * 64, 64)
            torch.testing.assert_close(g, torch.cat([d[i] for d in draws], 1))
            each = [image_loss(attack, d[i], labels[i], 255, 3) for d in draws]
            torch.testing.assert_close(
                image_loss(attack, g, lb, 255, 3),
                sum(each) / 5)
            of_mean = image_loss(attack,
                                 sum(d[i] for d in draws) / 5, labels[i], 255,
                                 3)
            assert abs(float(of_mean - sum(each) / 5)) > 1e-4
    assert not torch.allclose(draws[0][0], draws[1][0])  # it is random
    forward = partial(seg_logits, samples=samples)
    assert remedies.is_random(partial(forward, model), images)
    assert not remedies.is_random(partial(forward, twins['honest']), images)
    key = Attack('pgd', 'linf', 8, 10, 2., eot=5, bpda=True).key
    assert key == 'pgd-bpda-eot5/linf/8/10'


@pytest.mark.parametrize('name', ['pgd', 'apgd-mce', 'square'])
def test_an_eot_attack_runs_on_the_tiled_labels(twins, name):
    """Every attack takes EOT's stacked draws with the tiled labels: images
    in the ball, and on the rolled twin (whose draws differ) not the images
    of the same attack without EOT."""
    images, samples = batch(2)
    labelled(twins['honest'], images, samples)
    model = twins['rolled']
    got = {}
    for eot in (1, 3):
        model.generator.manual_seed(0)
        got[eot] = perturb(model, images, samples,
                           Attack(name, 'linf', 8, 4, 2., eot=eot))
        for x, x0 in zip(got[eot], images):
            assert x.shape == x0.shape
            assert (x - x0).abs().max() <= 8 + 1e-3
    assert any(not torch.equal(a, b) for a, b in zip(got[1], got[3]))


def test_the_rolled_twin_is_the_honest_model_on_a_rolled_image(twins):
    """Each call rolls each image by a fresh offset of at most 4 pixels and
    its logits back: the honest model's logits of the rolled image, rolled
    back (the offsets drawn here from the same generator state)."""
    images, samples = batch(3)
    model, honest = twins['rolled'], twins['honest']
    inputs = model.data_preprocessor(
        dict(inputs=images, data_samples=samples), False)['inputs']
    metas = [s.metainfo for s in samples]
    state = model.generator.get_state()
    seen = set()
    with torch.no_grad():
        for _ in range(3):
            offsets = torch.randint(
                -4,
                5, (3, 2),
                generator=torch.Generator().set_state(
                    model.generator.get_state()))
            got = model.encode_decode(inputs, metas)
            for x, lg, (dy, dx) in zip(inputs, got, offsets.tolist()):
                want = honest.encode_decode(
                    torch.roll(x, (dy, dx), dims=(-2, -1))[None], metas[:1])
                torch.testing.assert_close(
                    lg, torch.roll(want[0], (-dy, -dx), dims=(-2, -1)))
                seen.add((dy, dx))
    assert len(seen) > 1  # a fresh draw per image and call
    model.generator.set_state(state)


def test_a_masked_subset_fails_the_audit_per_image_without_transfer(twins):
    """30 % of 30 images (by path) rounded: PGD leaves those at their clean
    accuracy and the square attack beats it there. The audit of the twin's
    own cells (PGD, square; no transfer) fails image by image; BPDA brings
    PGD to the honest twin's."""
    images, samples = batch(30, seed=7)
    labels = labelled(twins['honest'], images, samples)
    model = twins['subset']
    masked = np.array([masked_path(s.img_path, 0.3) for s in samples])
    assert 5 <= masked.sum() <= 16
    right = own_cells(model, images, samples, labels)
    assert (right['pgd/linf/8/10'][masked]
            >= right['clean'][masked] - 200).all()
    px = np.full(30, 64 * 64)
    got = audit_of_counts(right, px, [8.])
    checks = {c['check']: c for c in got['checks']}
    per_image = checks['white-box beats black-box per image']
    assert per_image['passed'] is False, per_image['detail']
    assert per_image['rows'][0]['beaten'] >= masked.sum() - 1
    assert got['verdict'].startswith('failed: ')
    honest = attacked(twins['honest'], images, samples, labels)
    bpda = attacked(model, images, samples, labels, bpda=True)
    assert abs(bpda.sum() - honest.sum()) < 0.05 * px.sum()


def test_an_attack_that_helps_the_model_fails_sanity(twins):
    """The reversed twin (the input's gradient negated) against labels it
    mostly misses (the honest model's prediction of the image rolled by
    half): PGD's steps lower its loss and lift its aAcc far above clean,
    where square lowers it. The audit of its own cells (PGD, square; no
    transfer) fails sanity; the honest twin's PGD lowers it."""
    images, samples = batch(16, seed=5)
    rolled = [torch.roll(x, (32, 32), dims=(-2, -1)) for x in images]
    labels = labelled(twins['honest'], rolled, samples)
    model = twins['reversed']
    right = own_cells(model, images, samples, labels)
    px = np.full(16, 64 * 64)
    assert right['pgd/linf/8/10'].sum() > right['clean'].sum() + 0.2 * px.sum()
    got = audit_of_counts(right, px, [8.])
    checks = {c['check']: c for c in got['checks']}
    assert checks['sanity']['passed'] is False, checks['sanity']['detail']
    assert got['verdict'].startswith('failed: sanity')
    honest = attacked(twins['honest'], images, samples, labels)
    assert honest.sum() < right['clean'].sum()
