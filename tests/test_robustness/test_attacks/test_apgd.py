"""APGD with SEA's three losses (issue 37) against the independent
re-implementation of ``apgd_oracle``, on the tiny demo model; the
comparisons in float64 (``float64``: they hold on every kernel path, issue
52)."""
import glob
import json
from functools import partial

import numpy as np
import pytest
import torch
from apgd_oracle import (apgd_by_hand, class_weights_by_hand, loss_by_hand,
                         records_equal)
from attack_oracles import logits_by_hand
from builders import (BACKBONES, DEMO_ELLIPTICAL, ROOT, build_segmentor,
                      seg_samples)
from float64 import ATOL, batch64, model64
from PIL import Image
from processes import launch_env, load_tool, refused, run_command
from saved_models import first_images, load_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.errors import AnalysisError
from mmseg_elliptical.models import adaptive_relevance
from mmseg_elliptical.robustness.attacks import apgd
from mmseg_elliptical.robustness.attacks import class_weights as cw
from mmseg_elliptical.robustness.attacks import losses
from mmseg_elliptical.robustness.attacks import pgd as attacks
from mmseg_elliptical.robustness.attacks.cells import ATTACK_PROTOCOLS
from mmseg_elliptical.utils.config import ModelSpec

#: Class weights of the 5 demo classes for ``apgd-mce-bal``.
WEIGHTS = (0.05, 0.4, 0.1, 0.25, 0.2)


def test_every_apgd_attack_has_its_loss():
    """The names the tools check (utils/attack_cells.py, no torch) are the
    losses' (``losses.LOSSES``)."""
    assert tuple(losses.LOSSES) == attacks.APGD_ATTACKS


def first_batch(config: str, images: int = 2) -> dict:
    batches = list(first_images(config, images))
    return dict(
        inputs=[x for b in batches for x in b['inputs']],
        data_samples=[s for b in batches for s in b['data_samples']])


@pytest.fixture(scope='module')
def demo(demo_models, single_thread):
    model = load_model(demo_models[:2])
    model.eval()
    return model, first_batch(demo_models[0])


@pytest.fixture(scope='module')
def demo64(demo):
    """The demo model and images in float64."""
    return model64(demo[0]), batch64(demo[1])


def floating(x):
    """``x`` as the attacks take it: float32, float64 kept."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def run_package(model, batch, attack):
    """The package's APGD: its images and per-image stage records."""
    samples = batch['data_samples']
    x0 = [floating(x) for x in batch['inputs']]
    labels = [s.gt_sem_seg.data[0].long() for s in samples]
    keys = [s.img_path for s in samples]
    unit = attacks.UNIT[attack.norm]
    with adaptive_relevance(model, attack.adaptive):
        return apgd.apgd(
            partial(attacks.seg_logits, model, samples=samples),
            x0, labels, lambda j, r: attacks.random_start(
                attack, x0[j], keys[j], r / unit), attack.name, attack.norm,
            attack.eps * unit, attack.steps, 255, attack.class_weights)


def run_by_hand(model, batch, attack, forward=logits_by_hand):
    """The oracle on each image alone; ``forward(model, x, meta)`` gives
    its logits (default: computed by hand)."""
    out = []
    unit = attacks.UNIT[attack.norm]
    first = 2 * attack.eps if attack.norm == 'linf' else attack.eps
    for img, sample in zip(batch['inputs'], batch['data_samples']):
        x0 = floating(img)
        start = attacks.random_start(attack, x0, sample.img_path, first)
        with adaptive_relevance(model, attack.adaptive):
            out.append(
                apgd_by_hand(
                    partial(forward, model, meta=sample.metainfo), x0,
                    sample.gt_sem_seg.data[0].long(), attack.name, attack.norm,
                    attack.eps * unit, attack.steps, start, 255,
                    attack.class_weights))
    return out


@pytest.mark.parametrize('name, norm, eps, steps, adaptive', [
    ('apgd-mce', 'linf', 0.25, 10, False),
    ('apgd-mce-bal', 'linf', 0.25, 7, False),
    ('apgd-js', 'linf', 0.5, 10, True),
    ('apgd-mce', 'l2', 0.02, 6, False),
    ('apgd-js', 'l2', 0.05, 5, False),
    ('apgd-dlr', 'linf', 0.5, 8, True),
])
def test_apgd_equals_the_hand_written_one(demo64, name, norm, eps, steps,
                                          adaptive):
    """Images to float tolerance; per stage the radius, the iterations,
    the halvings, the kept point's iteration and accuracy; every point in
    its ball and in [0, 255]; ``perturb`` gives the same images. The
    random-weight model is fragile: small eps keep the first image above 0
    accuracy (its checkpoints halve the step), the second reaches 0 at once
    (its early stop, while the first runs on in the same batch)."""
    model, batch = demo64
    weights = WEIGHTS if name == 'apgd-mce-bal' else None
    attack = attacks.Attack(
        name, norm, eps, steps, 1., adaptive=adaptive, class_weights=weights)
    got, trace = run_package(model, batch, attack)
    want = run_by_hand(model, batch, attack)
    unit = attacks.UNIT[norm]
    halvings = 0
    for x, img, records, (x_hand, hand) in zip(got, batch['inputs'], trace,
                                               want):
        torch.testing.assert_close(x, x_hand, atol=ATOL, rtol=0)
        assert records_equal(records, hand), (records, hand)
        radii = [r['radius'] for r in records]
        if norm == 'linf':
            assert radii == [2 * eps, 1.5 * eps, eps]
            first = int(0.3 * steps)
            assert [r['steps']
                    for r in records] == [first, first, steps - 2 * first]
        else:
            assert radii == [eps * unit] and records[0]['steps'] == steps
        halvings += sum(len(r['halvings']) for r in records)
        delta = x - img
        size = delta.abs().max() if norm == 'linf' else delta.norm()
        assert 0 < size <= eps * unit + 1e-3
        assert 0 <= x.min() and x.max() <= 255
    assert halvings > 0  # the checkpoints were exercised
    images = attacks.perturb(model, batch['inputs'], batch['data_samples'],
                             attack)
    for x, y in zip(images, got):
        assert torch.equal(x, y)


def test_kept_point_has_the_lowest_accuracy_seen(demo):
    """The returned image is the last stage's kept point: its accuracy is
    the one recorded."""
    model, batch = demo
    attack = attacks.Attack('apgd-mce', 'linf', 2, 6, 1.)
    got, trace = run_package(model, batch, attack)
    for x, sample, records in zip(got, batch['data_samples'], trace):
        with torch.no_grad():
            logits = logits_by_hand(model, x, sample.metainfo)
        acc = losses.pixel_accuracy(logits, sample.gt_sem_seg.data[0].long())
        assert acc == pytest.approx(records[-1]['accuracy'])


@pytest.mark.parametrize('norm', ['linf', 'l2'])
def test_eps_zero_gives_the_clean_images(demo, norm):
    model, batch = demo
    attack = attacks.Attack('apgd-js', norm, 0, 4, 1.)
    got = attacks.perturb(model, batch['inputs'], batch['data_samples'],
                          attack)
    for x, img in zip(got, batch['inputs']):
        assert torch.equal(x, img.float())


def test_losses_against_the_hand_written_ones():
    torch.manual_seed(0)
    logits = torch.randn(5, 6, 7) * 3
    labels = torch.randint(0, 5, (6, 7))
    labels[0] = 255
    names = {
        'apgd-mce': losses.masked_cross_entropy,
        'apgd-mce-bal': losses.masked_cross_entropy,
        'apgd-js': losses.jensen_shannon,
        'apgd-dlr': losses.masked_margin,
        'ce': losses.cross_entropy
    }
    for name, fn in names.items():
        w = WEIGHTS if name == 'apgd-mce-bal' else None
        got = fn(logits, labels, 255, None if w is None else torch.tensor(w))
        torch.testing.assert_close(got,
                                   loss_by_hand(name, logits, labels, 255, w))
    # An ignored pixel never counts, whatever its logits.
    moved = logits.clone()
    moved[:, 0] = torch.randn(5, 7) * 10
    for fn in names.values():
        assert torch.equal(fn(logits, labels, 255), fn(moved, labels, 255))
    assert losses.LOSSES['apgd-mce-bal'] is losses.masked_cross_entropy
    assert losses.LOSSES['apgd-ce'] is losses.cross_entropy


def test_inverse_frequency_against_a_hand_count():
    maps = [np.array([[0, 0, 1], [255, 3, 0]]), np.array([[1, 0, 255]])]
    counts = [4, 2, 0, 1]
    assert losses.inverse_frequency(counts) == pytest.approx(
        class_weights_by_hand(maps, 4))
    # Rarer classes weigh more; the unseen class weighs as the rarest.
    w = losses.inverse_frequency(counts)
    assert w[0] < w[1] < w[3] == w[2]


@pytest.mark.parametrize('kwargs, words', [
    (dict(steps=3), 'apgd-mce needs steps >= 4'),
    (dict(name='apgd-js', steps=1), 'apgd-js needs steps >= 4'),
    (dict(eps=-1), 'eps -1'),
])
def test_bad_apgd_cells_are_refused(kwargs, words):
    args = dict(name='apgd-mce', norm='linf', eps=4, steps=4, step_size=1.)
    with pytest.raises(AnalysisError, match=words):
        attacks.Attack(**dict(args, **kwargs))


def test_apgd_sets_its_own_step_and_start():
    """``--step-size`` and ``--random-start`` do not apply to APGD: its
    cell says step 2 (x the stage radius) and a random start; L2 needs no
    red-eps stages, so 1 step is enough."""
    cell = attacks.Attack('apgd-mce', 'linf', 4, 4, 0.3, random_start=False)
    assert (cell.step_size, cell.random_start) == (2., True)
    assert cell.key == 'apgd-mce/linf/4/4'
    assert attacks.Attack('apgd-mce', 'l2', 0.5, 1, 0.1).steps == 1
    assert apgd.stages('linf', 1., 300) == [(2., 90), (1.5, 90), (1., 120)]


def test_balanced_without_weights_is_refused(demo):
    model, batch = demo
    attack = attacks.Attack('apgd-mce-bal', 'linf', 4, 4, 1.)
    with pytest.raises(AnalysisError, match='class weights'):
        attacks.perturb(model, batch['inputs'], batch['data_samples'], attack)


@pytest.mark.parametrize('family', BACKBONES)
def test_apgd_on_every_family(family, family_models, single_thread):
    """APGD only calls the attacked function: on every tiny family it
    equals the hand-written one (FAMILY: L-inf with its 3 stages)."""
    model = model64(load_model(family_models[family]))
    model.eval()
    batch = batch64(first_batch(family_models[family][0], 1))
    attack = attacks.Attack('apgd-mce', 'linf', 0.5, 4, 1.)
    got, trace = run_package(model, batch, attack)
    (x_hand, hand), = run_by_hand(model, batch, attack)
    torch.testing.assert_close(got[0], x_hand, atol=ATOL, rtol=0)
    assert records_equal(trace[0], hand)


def test_class_weights_count_the_training_set_once(demo_models, demo_root,
                                                   tmp_path, monkeypatch):
    """The weights are the inverse pixel counts of the training annotations
    (counted here from the PNG files), cached beside the store and read
    back from there."""
    maps = [
        np.array(Image.open(p))
        for p in sorted(glob.glob(f'{demo_root}/annotations/training/*.png'))
    ]
    assert len(maps) == 8
    want = class_weights_by_hand(maps, 5)
    specs = [
        ModelSpec(n, demo_models[i], demo_models[i + 1])
        for n, i in (('ell', 0), ('dot', 2))
    ]
    got = cw.class_weights_of(['pgd', 'apgd-mce-bal'], specs, {}, tmp_path)
    assert list(got) == ['ell', 'dot']
    assert got['ell'] == got['dot'] == pytest.approx(want)
    cache = json.load(open(tmp_path / cw.CACHE))
    entry, = cache.values()  # the twins share one training set
    assert entry['counts'] == [
        sum(int((m == c).sum()) for m in maps) for c in range(5)
    ]

    def forbidden(*args):
        raise AssertionError('counted again')

    monkeypatch.setattr(cw, 'count_pixels', forbidden)
    assert cw.class_weights_of(['apgd-mce-bal'], specs, {}, tmp_path) == got
    assert cw.class_weights_of(['apgd-mce'], specs, {}, tmp_path) == {}
    # Each model's balanced cells get its weights; the others stay as they
    # are.
    cells = {
        'ell': [(None, None),
                attacks.Attack('apgd-mce-bal', 'linf', 1, 4, 1.)]
    }
    weighted = cw.weighted_cells(cells, got)
    assert weighted['ell'][0] == (None, None)
    assert weighted['ell'][1].class_weights == got['ell']


def test_the_tool_refuses_bad_apgd_lines(demo_models, tmp_path, monkeypatch,
                                         capsys):
    tool = load_tool('analysis_tools/adversarial.py')

    def forbidden(*args, **kwargs):
        raise AssertionError('a model was built')

    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    monkeypatch.setattr('mmseg.registry.MODELS.build', forbidden)
    argv = demo_models + ['--work-dir', str(tmp_path / 'w')]
    bal = ['--attacks', 'apgd-mce-bal']
    for extra, words in (
        (['--attacks', 'apgd-js', '--steps', '3'], 'apgd-js needs steps >= 4'),
        (['--attacks', 'apgd'], "argument --attacks: invalid choice: 'apgd'"),
        (bal + ['--cfg-options', 'train_dataloader.dataset=None'],
         'the config has no train_dataloader.dataset'),
        (bal + [
            '--cfg-options', f'train_dataloader.dataset.data_root={tmp_path}',
            'train_dataloader.dataset.generate=None'
        ], 'apgd-mce-bal cannot count the classes of the training set'),
    ):
        assert words in refused(capsys, tool.main, argv + extra), extra
    assert not (tmp_path / 'w').exists()


#: A small grid of the three APGD cells, eps 0 and 0.5.
APGD_GRID = [
    '--attacks', 'apgd-mce', 'apgd-mce-bal', 'apgd-js', '--epsilons', '0',
    '0.5', '--steps', '4', '--step-size', '3', '--max-images', '3',
    '--resamples', '50'
]


@pytest.fixture(scope='module')
def apgd_run(demo_models, tmp_path_factory):
    tool = load_tool('analysis_tools/adversarial.py')
    work = tmp_path_factory.mktemp('apgd_grid')
    data = tool.main(demo_models[:2] + APGD_GRID + ['--work-dir', str(work)])
    return work, json.loads(json.dumps(data))


def test_grid_with_apgd_cells(apgd_run):
    """The three APGD cells through the tool: eps 0 is the clean cell, the
    cells are keyed ``ATTACK/NORM/EPS/STEPS`` with perturbations inside the
    ball, and apgd-mce-bal's weights are cached beside the store."""
    work, data = apgd_run
    name, = data['models']
    cells = data['models'][name]['cells']
    keys = [f'{a}/linf/{e}/4' for a in apgd.SEA_ATTACKS for e in ('0', '0.5')]
    assert sorted(cells) == sorted(['clean', *keys])
    for key in keys:
        if '/0/' in key:
            for metric in ('mIoU', 'aAcc', 'mAcc'):
                assert cells[key][metric] == cells['clean'][metric]
            assert cells[key]['max_linf'] == 0
        else:
            assert 0 < cells[key]['max_linf'] <= 0.5 + 1e-4
            assert cells[key]['aAcc'] <= cells['clean']['aAcc'] + 1e-9
    assert (work / 'class_weights.json').is_file()
    assert 'apgd-mce' in (work / 'adversarial.md').read_text()


def test_apgd_presets():
    sea = ATTACK_PROTOCOLS['sea']
    assert sea.attacks == ('apgd-mce', 'apgd-mce-bal', 'apgd-js')
    assert (sea.norm, sea.epsilons, sea.steps) == ('linf', (0.25, 0.5, 1, 2),
                                                   300)
    # Per image: 1 clean forward; 3 losses x 4 eps x (300 iterations + 3
    # stage starts + the prediction) forwards, 300 backwards each.
    assert sea.passes() == (1 + 12 * 304, 12 * 300)
    robust = ATTACK_PROTOCOLS['sea-robust']
    assert robust.epsilons == (4, 8, 12) and robust.attacks == sea.attacks
    assert robust.passes() == (1 + 9 * 304, 9 * 300)
    quick = ATTACK_PROTOCOLS['quick']
    assert 'apgd-mce' in quick.attacks
    # PGD, SegPGD: 5 + 1 each; APGD-MCE: 5 + 3 + 1; at eps 1 and 4.
    assert quick.passes() == (1 + 2 * (6 + 6 + 9), 2 * 15)
    assert all(c.step_size == 2. for c in sea.cells())


def test_apgd_on_ignored_labels_and_images_near_0_and_255():
    """A random demo model on an image within 3 levels of 0 (left) and 255
    (right) whose top quarter and every 7th pixel are ignored: APGD equals
    the hand-written one and stays in [0, 255]; the class weights given
    to every cell weigh only apgd-mce-bal's loss."""
    model = model64(build_segmentor(DEMO_ELLIPTICAL).eval())
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (3, 64, 64), generator=g).double()
    x[..., 32:] = 255 - x[..., 32:]
    sample, = seg_samples(1, 64, 64, 5, torch.Generator().manual_seed(1))
    labels = sample.gt_sem_seg.data
    labels[:, :16] = 255
    labels.view(-1)[::7] = 255
    batch = dict(inputs=[x], data_samples=[sample])
    sample.set_metainfo(dict(img_path='edge.png'))
    for name in losses.LOSSES:
        attack = attacks.Attack(name, 'linf', 2, 5, 1., class_weights=WEIGHTS)
        got, trace = run_package(model, batch, attack)
        (want, hand), = run_by_hand(model, batch, attack)
        torch.testing.assert_close(got[0], want, atol=ATOL, rtol=0)
        assert records_equal(trace[0], hand)
        assert 0 <= got[0].min() and got[0].max() <= 255
        assert (got[0] - x).abs().max() <= 2 + 1e-4


@pytest.mark.slow
def test_two_processes_give_the_single_process_apgd_cells(
        demo_models, apgd_run, tmp_path):
    """tools/dist_adversarial.sh on 2 gloo processes: the same APGD cells
    and per-image areas (each process counts the class weights, and the
    cache survives both writing it)."""
    work = tmp_path / 'dist'
    run_command([
        'bash', f'{ROOT}/tools/dist_adversarial.sh', '2', *demo_models[:2],
        *APGD_GRID, '--work-dir',
        str(work)
    ],
                env=launch_env())
    data = json.loads((work / 'adversarial.json').read_text())
    one_work, one = apgd_run
    name, = one['models']
    for key, cell in one['models'][name]['cells'].items():
        got = data['models'][name]['cells'][key]
        for metric in ('mIoU', 'aAcc', 'mAcc', 'max_linf', 'max_l2'):
            assert got.get(metric) == cell.get(metric), (key, metric)
        for area in ('intersect', 'union'):
            with np.load(work / 'areas' / name / f'{key}.npz') as a, \
                    np.load(one_work / 'areas' / name / f'{key}.npz') as b:
                assert np.array_equal(a[area], b[area])
    assert json.loads((work / 'class_weights.json').read_text()) == \
        json.loads((one_work / 'class_weights.json').read_text())
