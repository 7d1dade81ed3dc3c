"""APGD's training mode (issue 45, item 5) against ``apgd_train_oracle``,
a transcription of SEA's ``apgd_train``, on the tiny demo model, from one
fixed random start given to both, in float64 (``float64``: the comparison
then holds on every kernel path, issue 52)."""
import os.path as osp
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import pytest
import torch
from apgd_train_oracle import per_image
from attack_oracles import logits_by_hand
from float64 import ATOL, batch64, model64
from saved_models import first_images, load_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.models import adaptive_relevance
from mmseg_elliptical.robustness.attacks import apgd, losses
from mmseg_elliptical.robustness.attacks import pgd as attacks


@dataclass(frozen=True)
class TrainingAttack(attacks.Attack):
    """A cell whose APGD runs in the training mode (the training hook's
    cells are of its own such class)."""
    train: ClassVar[bool] = True


@pytest.fixture(scope='module')
def demo(demo_models, single_thread):
    model = load_model(demo_models[:2])
    model.eval()
    batches = list(first_images(demo_models[0], 2))
    return model, dict(
        inputs=[x for b in batches for x in b['inputs']],
        data_samples=[s for b in batches for s in b['data_samples']])


@pytest.fixture(scope='module')
def demo64(demo):
    """The demo model and images in float64."""
    return model64(demo[0]), batch64(demo[1])


def floats(batch) -> list:
    """The images as the attack starts from them (float64 stays)."""
    return [
        x.to(torch.promote_types(x.dtype, torch.float32))
        for x in batch['inputs']
    ]


def starts_of(attack, batch) -> list:
    """Each image's seeded start in the eps ball (the grid's draw), keyed by
    its file name: the same in every session (not the tmp folder's)."""
    return [
        attacks.random_start(attack, x, osp.basename(s.img_path))
        for x, s in zip(floats(batch), batch['data_samples'])
    ]


def run_package(model, batch, attack, train=True) -> tuple:
    samples = batch['data_samples']
    x0 = floats(batch)
    labels = [s.gt_sem_seg.data[0].long() for s in samples]
    starts = starts_of(attack, batch)
    forward = partial(attacks.seg_logits, model, samples=samples)
    eps = attack.eps * attacks.UNIT[attack.norm]
    with adaptive_relevance(model, attack.adaptive):
        return apgd.apgd(forward, x0, labels, lambda j, r: starts[j],
                         attack.name, attack.norm, eps, attack.steps, 255,
                         attack.class_weights, train)


def run_oracle(model, batch, attack) -> dict:
    """The transcription on each image alone, on logits computed by hand."""
    samples = batch['data_samples']

    def model_of(j):
        return lambda z: logits_by_hand(model, z[0], samples[j].metainfo)[None]

    with adaptive_relevance(model, attack.adaptive):
        return per_image(model_of, floats(batch),
                         [s.gt_sem_seg.data[0].long() for s in samples],
                         starts_of(attack, batch), attack.norm,
                         attack.eps * attacks.UNIT[attack.norm], attack.steps,
                         attack.name)


@pytest.mark.parametrize('name, norm, eps, steps, adaptive', [
    ('apgd-ce', 'linf', 0.5, 10, False),
    ('apgd-ce', 'linf', 2, 10, True),
    ('apgd-mce', 'linf', 0.25, 10, False),
    ('apgd-ce', 'l2', 0.1, 8, False),
    ('apgd-ce', 'l2', 0.05, 8, False),
])
def test_training_mode_is_sea_apgd_train(demo64, name, norm, eps, steps,
                                         adaptive):
    """The images (SEA's ``x_best``) to float64 tolerance and each image's
    step halvings; one stage at eps; ``perturb`` of a training cell gives
    the same images; the evaluation mode gives others. (In float32 the
    random-weight model's flat loss let rounding flip a checkpoint's
    near-tie, at eps 0.05 here and at eps 0.1 on other kernel paths.)"""
    model, batch = demo64
    attack = TrainingAttack(name, norm, eps, steps, 2., adaptive=adaptive)
    got, trace = run_package(model, batch, attack)
    want = run_oracle(model, batch, attack)
    unit = attacks.UNIT[norm]
    halvings = 0
    found = zip(got, batch['inputs'], trace, want['x_best'], want['halvings'])
    for x, img, (record, ), x_hand, hand in found:
        torch.testing.assert_close(x, x_hand, atol=ATOL, rtol=0)
        assert record['halvings'] == hand, (record, hand)
        assert (record['radius'], record['steps']) == (eps * unit, steps)
        halvings += len(hand)
        delta = x - img
        size = delta.abs().max() if norm == 'linf' else delta.norm()
        assert 0 < size <= eps * unit + 1e-3
        assert 0 <= x.min() and x.max() <= 255
    assert halvings > 0  # the checkpoints were exercised
    images = attacks.perturb(
        model,
        batch['inputs'],
        batch['data_samples'],
        attack,
        start_keys=[osp.basename(s.img_path) for s in batch['data_samples']])
    for x, y in zip(images, got):
        assert torch.equal(x, y)
    evaluation = run_package(model, batch, attack, train=False)[0]
    assert any(not torch.equal(x, y) for x, y in zip(evaluation, got))


def test_training_mode_returns_the_highest_loss_and_does_not_stop(demo64):
    """Every point the attack evaluates, seen by a spy on its forward: the
    returned image is each image's first point of highest plain
    cross-entropy, and every iteration runs though an image is at 0 pixel
    accuracy (the evaluation mode stops it). In float64: in float32 an
    image stood still at one step on one CPU's kernels."""
    model, batch = demo64
    samples = batch['data_samples']
    labels = [s.gt_sem_seg.data[0].long() for s in samples]
    seen = []

    def spy(xs):
        logits = attacks.seg_logits(model, xs, samples)
        with torch.no_grad():
            seen.append([(x.detach().clone(),
                          float(losses.cross_entropy(lg, lb)),
                          losses.pixel_accuracy(lg, lb))
                         for x, lg, lb in zip(xs, logits, labels)])
        return logits

    attack = TrainingAttack('apgd-ce', 'linf', 0.5, 10, 2.)
    starts = starts_of(attack, batch)
    x0 = floats(batch)
    got, _ = apgd.apgd(
        spy,
        x0,
        labels,
        lambda j, r: starts[j],
        'apgd-ce',
        'linf',
        0.5,
        10,
        train=True)
    assert len(seen) == 1 + 10
    assert any(step[j][2] == 0 for step in seen[:-1] for j in range(2))
    for j, x in enumerate(got):
        points = [step[j] for step in seen]
        for before, after in zip(points, points[1:]):  # each image moves on
            assert not torch.equal(before[0], after[0])
        best = max(range(len(points)), key=lambda i: points[i][1])
        assert best > 0  # not the start
        assert torch.equal(x, points[best][0])


def test_training_cells_skip_the_evaluation_stage_floor():
    """One L-inf stage: a training cell runs with fewer than 4 iterations,
    which the grid's APGD cells refuse; it is the grid's cell otherwise."""
    cell = TrainingAttack('apgd-ce', 'linf', 4, 2, 1.)
    assert (cell.train, cell.step_size, cell.random_start) == (True, 2., True)
    assert cell.to_dict() == attacks.Attack('apgd-ce', 'linf', 4, 4,
                                            1.).to_dict() | dict(steps=2)
    assert not attacks.Attack.train
    with pytest.raises(Exception, match='apgd-ce needs steps >= 4'):
        attacks.Attack('apgd-ce', 'linf', 4, 2, 1.)
