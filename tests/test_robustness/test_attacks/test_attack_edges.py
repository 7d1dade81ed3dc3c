"""The attacks at their edges, against the hand-written ones
(``attack_oracles``): images near 0 and 255, labels with ignored pixels, an
L-inf attack that reaches the ball's edge, the norms a cell reports; and
the cells the tool gives each preset and each model."""
from types import SimpleNamespace

import pytest
import torch
from attack_oracles import attack_by_hand, loss_by_hand
from builders import DEMO_DOT, DEMO_ELLIPTICAL, build_segmentor, seg_samples
from float64 import ATOL, model64
from mmengine.config import Config
from processes import load_tool

from mmseg_elliptical.robustness.attacks import pgd as attacks
from mmseg_elliptical.robustness.attacks.elliptical import \
    has_elliptical_layers


def dark_and_bright(seed: int = 0) -> torch.Tensor:
    """A ``[3, 64, 64]`` 0-255 image whose left half is within 3 levels of
    0 and right half within 3 levels of 255."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (3, 64, 64), generator=g).float()
    x[..., 32:] = 255 - x[..., 32:]
    return x


def ignored_labels(seed: int = 1):
    """One 64 x 64 sample of 5 classes whose top quarter and every 7th
    pixel are ignored (255)."""
    sample, = seg_samples(1, 64, 64, 5, torch.Generator().manual_seed(seed))
    labels = sample.gt_sem_seg.data
    labels[:, :16] = 255
    labels.view(-1)[::7] = 255
    return sample


@pytest.fixture(scope='module')
def model():
    return build_segmentor(DEMO_ELLIPTICAL).eval()


@pytest.mark.parametrize('norm, eps', [('linf', 8.), ('l2', 0.5)])
def test_random_start_stays_in_0_255(norm, eps):
    x = dark_and_bright()
    attack = attacks.Attack('pgd', norm, eps, 1, 1., random_start=True)
    start = attacks.random_start(attack, x, 'a.png')
    assert 0 <= start.min() and start.max() <= 255
    # It was clamped: many pixels moved out of range, and sit on its ends.
    assert (start == 0).sum() > 1000 and (start == 255).sum() > 1000


@pytest.mark.parametrize('name', attacks.PGD_ATTACKS)
def test_ignored_pixels_count_nowhere_in_the_loss(name):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(5, 64, 64, generator=g)
    labels = ignored_labels().gt_sem_seg.data[0].long()
    attack = attacks.Attack(name, 'linf', 4, 3, 1.)
    got = attacks.image_loss(attack, logits, labels, 255, 1)
    assert got == pytest.approx(
        float(loss_by_hand(name, logits, labels, 255, 1, 3)), rel=1e-5)
    # Whatever the logits of the ignored pixels, the loss is the same.
    changed = torch.where(labels == 255, logits * 7 + 3, logits)
    assert attacks.image_loss(attack, changed, labels, 255, 1) == \
        pytest.approx(float(got), rel=1e-6)


def check_attack(model, attack, image, sample):
    """The package's adversarial image equals the hand-written one, both in
    float64 (``float64``); it lies in the ball and in [0, 255]; returns
    it."""
    model, image = model64(model), image.double()
    got, = attacks.perturb(model, [image], [sample], attack)
    start = None
    if attack.random_start:
        start = attacks.random_start(attack, image,
                                     sample.metainfo.get('img_path', 0))
    want = attack_by_hand(model, image, sample.metainfo,
                          sample.gt_sem_seg.data[0], attack.name, attack.norm,
                          attack.eps, attack.steps, attack.step_size,
                          attack.labels, start)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    eps = attack.eps * attacks.UNIT[attack.norm]
    delta = got - image
    norm = delta.abs().max() if attack.norm == 'linf' else delta.norm()
    assert norm <= eps + 1e-3 and 0 <= got.min() and got.max() <= 255
    return got


@pytest.mark.parametrize('name', attacks.PGD_ATTACKS)
def test_attacks_on_ignored_labels_and_images_near_0_and_255(model, name):
    attack = attacks.Attack(name, 'linf', 4, 2, 1.5, random_start=True)
    check_attack(model, attack, dark_and_bright(), ignored_labels())


def test_linf_attack_reaches_the_edge_of_the_ball(model):
    """4 steps of 1.5 levels in a ball of 2: most pixels end on its edge,
    none beyond it."""
    image = torch.rand(
        3, 64, 64, generator=torch.Generator().manual_seed(3)) * 200 + 28
    attack = attacks.Attack('pgd', 'linf', 2, 4, 1.5)
    got = check_attack(model, attack, image, ignored_labels())
    edge = ((got - image).abs() - 2).abs() < 1e-3
    assert edge.float().mean() > 0.5


def test_the_loop_reports_max_linf_in_levels_and_max_l2_on_0_1(model):
    """``AdversarialTestLoop``'s norms over a batch of two images, against
    the hand-written attack's images."""
    loop = attacks.AdversarialTestLoop.__new__(attacks.AdversarialTestLoop)
    loop.attack = attacks.Attack('pgd', 'l2', 0.5, 2, 0.3)
    loop.max_linf = loop.max_l2 = 0.
    loop.fp16 = False
    loop._runner = SimpleNamespace(
        model=model, call_hook=lambda *args, **kwargs: None)
    loop.evaluator = SimpleNamespace(process=lambda **kwargs: None)
    images = [dark_and_bright(4), dark_and_bright(5)]
    samples = seg_samples(2, 64, 64, 5)
    loop.run_iter(0, dict(inputs=images, data_samples=samples))
    linf, l2 = [], []
    for image, sample in zip(images, samples):
        x = attack_by_hand(model, image, sample.metainfo,
                           sample.gt_sem_seg.data[0], 'pgd', 'l2', 0.5, 2, 0.3)
        linf.append(float((x - image).abs().max()))
        l2.append(float(((x - image) / 255).square().sum().sqrt()))
    assert loop.max_linf == pytest.approx(max(linf), abs=1e-2)
    assert loop.max_l2 == pytest.approx(max(l2), abs=1e-4)
    assert 0.3 < loop.max_l2 <= 0.5 + 1e-6


# ------------------------------------------------ the cells the tool runs


class Captured(Exception):
    """Stops the tool once it hands its cells to the grid."""


def cells_of(argv, monkeypatch) -> dict:
    """``{model: [Attack]}`` the adversarial tool would run for ``argv``
    (nothing runs)."""
    seen = {}

    def capture(specs, cells, *args, **kwargs):
        seen.update(cells)
        raise Captured

    monkeypatch.setattr('mmseg_elliptical.robustness.grid.run.run_cells',
                        capture)
    with pytest.raises(Captured):
        load_tool('analysis_tools/adversarial.py').main(argv)
    return {name: cells[1:] for name, cells in seen.items()}  # not clean


#: Each preset's documented cells (docs/evidence.md, utils/attack_cells.py):
#: attacks, eps, steps and the step of each eps.
PRESETS = {
    'default': (('pgd', 'segpgd', 'cospgd'), (0.25, 0.5, 1, 2, 4, 8), 20,
                lambda eps: 2.55),
    'paper': (('fgsm', 'pgd'), (1, 2, 3, 4, 5, 6), 20, lambda eps: 0.15 * eps),
    'quick': (('pgd', 'segpgd', 'apgd-mce'), (1, 4), 5, lambda eps: 1.),
    'sea':
    (('apgd-mce', 'apgd-mce-bal', 'apgd-js'), (0.25, 0.5, 1, 2), 300, None),
    'sea-robust':
    (('apgd-mce', 'apgd-mce-bal', 'apgd-js'), (4, 8, 12), 300, None),
}
#: APGD sets its own step: 2 x the stage's radius.
APGD_STEP = 2.


@pytest.mark.parametrize('protocol', sorted(PRESETS))
def test_each_preset_runs_its_documented_cells(protocol, demo_models, tmp_path,
                                               monkeypatch):
    names, epsilons, steps, step_of = PRESETS[protocol]
    cells = cells_of(
        demo_models[:2] +
        ['--protocol', protocol, '--work-dir',
         str(tmp_path)], monkeypatch)
    want = []
    for name in names:
        for eps in epsilons:
            n, step = (1, eps) if name == 'fgsm' else (
                steps, APGD_STEP if name.startswith('apgd') else step_of(eps))
            want.append((name, 'linf', eps, n, pytest.approx(step)))
    got = [(c.name, c.norm, c.eps, c.steps, c.step_size)
           for c in next(iter(cells.values()))]
    assert got == want


def test_adaptive_cells_go_to_elliptical_models_only(demo_models, tmp_path,
                                                     monkeypatch):
    cells = cells_of(
        demo_models + [
            '--names', 'ell', 'dot', '--attacks', 'pgd', '--epsilons', '2',
            '--steps', '1', '--adaptive', '--work-dir',
            str(tmp_path)
        ], monkeypatch)
    plain, adaptive = 'pgd/linf/2/1', 'pgd-adaptive/linf/2/1'
    assert [c.key for c in cells['ell']] == [plain, adaptive]
    assert [c.key for c in cells['dot']] == [plain]


def test_the_configs_say_which_model_has_elliptical_layers():
    assert has_elliptical_layers(Config.fromfile(DEMO_ELLIPTICAL).model)
    assert not has_elliptical_layers(Config.fromfile(DEMO_DOT).model)
