"""The adversarial grid: the attacks against hand-written ones on every
family, the ball, the adaptive switch, the grid's cells, resume, settings
and summary against independent computations."""
import json
import os
import os.path as osp
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from attack_oracles import (attack_by_hand, chosen_areas, logits_by_hand,
                            min_accuracy_by_hand, miou_by_hand,
                            switches_that_lower)
from builders import BACKBONES, HAS_MMDET, ROOT, seg_samples
from float64 import ATOL, batch64, model64
from mmengine.config import Config
from processes import launch_env, load_tool, refused, run_command
from saved_models import first_images, load_model
from shipped_configs import tiny_head_model, tiny_mask_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.models import adaptive_relevance
from mmseg_elliptical.robustness.attacks import pgd as attacks
from mmseg_elliptical.robustness.attacks.cells import ATTACK_PROTOCOLS
from mmseg_elliptical.robustness.grid import loop as grid_loop
from mmseg_elliptical.robustness.grid.areas import ImageAreas
from mmseg_elliptical.robustness.grid.loop import CorruptionGridLoop
from mmseg_elliptical.robustness.statistics.bootstrap import paired_bootstrap

#: Each family's threat model (every attack runs on it), small budgets.
FAMILY_ATTACKS = {
    'segmenter': ('linf', 4, 3, 1., True),
    'vit': ('linf', 8, 2, 2., False),
    'mit': ('linf', 4, 2, 1., True),
    'pcpvt': ('l2', 0.5, 2, 0.2, False),
    'swin': ('l2', 0.5, 2, 0.2, True),
    'beit': ('linf', 2, 2, 1., False),
    'mae': ('linf', 4, 2, 2., True),
}


def paths_of(family, demo_models, family_models):
    return demo_models[:2] if family == 'segmenter' else \
        family_models[family]


def first_batch(config: str, images: int = 1) -> dict:
    """The first ``images`` test images as one batch."""
    batches = list(first_images(config, images))
    return dict(
        inputs=[x for b in batches for x in b['inputs']],
        data_samples=[s for b in batches for s in b['data_samples']])


def check_against_hand(model, batch, attack: attacks.Attack):
    """The package's adversarial images (float64) equal the hand-written
    attack's, both in float64 (``float64``: in float32 a gradient component
    within rounding of 0 took the other sign on some kernel path, a whole
    step on an L-inf pixel)."""
    model, batch = model64(model), batch64(batch)
    got = attacks.perturb(model, batch['inputs'], batch['data_samples'],
                          attack)
    for x, img, sample in zip(got, batch['inputs'], batch['data_samples']):
        start = attacks.random_start(attack, img, sample.img_path) \
            if attack.random_start else None
        with adaptive_relevance(model, attack.adaptive):
            want = attack_by_hand(model, img, sample.metainfo,
                                  sample.gt_sem_seg.data[0], attack.name,
                                  attack.norm, attack.eps, attack.steps,
                                  attack.step_size, attack.labels, start)
        assert x.shape == want.shape
        torch.testing.assert_close(x, want, atol=ATOL, rtol=0)
        eps = attack.eps * attacks.UNIT[attack.norm]
        delta = x - img
        norm = delta.abs().max() if attack.norm == 'linf' else delta.norm()
        assert norm <= eps + 1e-3 and 0 <= x.min() and x.max() <= 255
        assert norm > 0  # it moved
    # No parameter got a gradient.
    assert all(p.grad is None for p in model.parameters())
    return got


@pytest.mark.parametrize('family', ['segmenter', *BACKBONES])
def test_attacks_equal_the_hand_written_ones_on_every_family(
        family, demo_models, family_models):
    if family not in FAMILY_ATTACKS:
        pytest.fail(f'no attack chosen for the new family {family}')
    paths = paths_of(family, demo_models, family_models)
    model = load_model(paths)
    model.eval()
    norm, eps, steps, step, adaptive = FAMILY_ATTACKS[family]
    batch = first_batch(paths[0])
    for name in attacks.PGD_ATTACKS:
        got = check_against_hand(
            model, batch,
            attacks.Attack(name, norm, eps, steps, step, adaptive=adaptive))
    # The prediction of the attacked image, as the evaluator sees it, is
    # the argmax of the hand-written logits.
    out = model.test_step(dict(inputs=got, data_samples=batch['data_samples']))
    with torch.no_grad():
        want = logits_by_hand(model, got[0], batch['data_samples'][0].metainfo)
    assert torch.equal(out[0].pred_sem_seg.data[0], want.argmax(0))


@pytest.mark.parametrize('name', attacks.PGD_ATTACKS)
@pytest.mark.parametrize('norm', attacks.NORMS)
def test_every_attack_and_norm_on_the_demo_model(name, norm, demo_models):
    """L-inf on the ground truth, L2 on the prediction from a random
    start."""
    model = load_model(demo_models[:2])
    model.eval()
    batch = first_batch(demo_models[0])
    eps, step = (4, 1.) if norm == 'linf' else (0.3, 0.1)
    labels, start = ('gt', False) if norm == 'linf' else ('prediction', True)
    check_against_hand(
        model, batch,
        attacks.Attack(name, norm, eps, 2, step, start, labels=labels))


def test_per_image_results_do_not_depend_on_the_batch(demo_models):
    """In float64: in float32 a batch of 2 and of 1 round otherwise, which
    sign steps can amplify on some kernel path."""
    model = model64(load_model(demo_models[:2]))
    model.eval()
    batch = batch64(first_batch(demo_models[0], 2))
    attack = attacks.Attack('cospgd', 'linf', 4, 3, 1., random_start=True)
    together = attacks.perturb(model, batch['inputs'], batch['data_samples'],
                               attack)
    for i in range(2):
        alone = attacks.perturb(model, batch['inputs'][i:i + 1],
                                batch['data_samples'][i:i + 1], attack)
        torch.testing.assert_close(alone[0], together[i], atol=ATOL, rtol=0)


def test_adaptive_changes_the_gradient_of_elliptical_models_only(demo_models):
    """Through ``m``: the elliptical model's input gradient changes, the
    dot-product twin's (same weights) does not; outside the context ``m``
    is a constant again."""
    batch = first_batch(demo_models[0])
    x = batch['inputs'][0].float()
    sample = batch['data_samples'][0]

    def grad(paths, through_m=False):
        model = load_model(paths)
        model.eval()
        y = x.clone().requires_grad_(True)
        with adaptive_relevance(model, through_m):
            loss = logits_by_hand(model, y, sample.metainfo).square().mean()
            return torch.autograd.grad(loss, [y])[0]

    for paths, changes in ((demo_models[:2], True), (demo_models[2:], False)):
        plain = grad(paths)
        adaptive = grad(paths, True)
        again = grad(paths)
        assert torch.equal(plain, again)
        assert (not torch.allclose(plain, adaptive, atol=1e-7)) == changes
        if not changes:
            assert torch.equal(plain, adaptive)


def test_random_start_is_seeded_per_image():
    attack = attacks.Attack('pgd', 'linf', 8, 2, 1., random_start=True)
    x = torch.full((3, 5, 7), 128.)
    a = attacks.random_start(attack, x, 'a.jpg')
    assert torch.equal(a, attacks.random_start(attack, x, 'a.jpg'))
    assert not torch.equal(a, attacks.random_start(attack, x, 'b.jpg'))
    assert (a - x).abs().max() <= 8
    l2 = attacks.Attack('pgd', 'l2', 0.1, 2, 0.1, random_start=True)
    assert (attacks.random_start(l2, x, 'a.jpg') - x).norm() <= 0.1 * 255


def test_fgsm_is_one_step_of_eps():
    attack = attacks.Attack('fgsm', 'linf', 4, 20, 1., random_start=True)
    assert (attack.steps, attack.step_size, attack.random_start) == (1, 4,
                                                                     False)
    assert attack.key == 'fgsm/linf/4/1'
    adaptive = attacks.Attack('pgd', 'l2', 0.25, 10, 0.1, adaptive=True)
    assert adaptive.key == 'pgd-adaptive/l2/0.25/10'


@pytest.mark.parametrize('kwargs, words', [
    (dict(eps=-1), 'eps -1'),
    (dict(eps=256), 'eps 256'),
    (dict(steps=0), 'steps 0'),
    (dict(step_size=0), 'step size 0'),
    (dict(name='fgsm', eps=-1), 'eps -1'),
    (dict(name='fgm'), "attack 'fgm'"),
    (dict(norm='l1'), "norm 'l1'"),
    (dict(labels='pred'), "labels 'pred'"),
])
def test_bad_attacks_are_refused(kwargs, words):
    args = dict(name='pgd', norm='linf', eps=4, steps=2, step_size=1.)
    with pytest.raises(mmseg_elliptical.errors.AnalysisError, match=words):
        attacks.Attack(**dict(args, **kwargs))


# ---------------------------------------------------------------- the grid

GRID = [
    '--attacks', 'pgd', 'fgsm', '--epsilons', '0', '4', '--steps', '2',
    '--step-size', '2', '--max-images', '3', '--resamples', '100'
]
KEYS = [
    'clean', 'fgsm/linf/0/1', 'fgsm/linf/4/1', 'pgd/linf/0/2', 'pgd/linf/4/2'
]


@pytest.fixture(scope='module')
def attack_run(demo_models, tmp_path_factory):
    tool = load_tool('analysis_tools/adversarial.py')
    work = tmp_path_factory.mktemp('adversarial')
    data = tool.main(demo_models + GRID +
                     ['--names', 'ell', 'dot', '--work-dir',
                      str(work)])
    return work, json.loads(json.dumps(data))


def same(a, b) -> bool:
    """Equal as JSON (the NaN IoU of a class that is nowhere included)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def areas_of(work, name, key):
    with np.load(osp.join(work, 'areas', name, f'{key}.npz')) as f:
        return f['intersect'], f['union']


def labelled_of(work, name, key):
    with np.load(osp.join(work, 'areas', name, f'{key}.npz')) as f:
        return f['labelled']


def test_grid_cells(attack_run):
    work, data = attack_run
    for name in ('ell', 'dot'):
        cells = data['models'][name]['cells']
        assert sorted(cells) == KEYS
        # eps 0 is the clean cell exactly.
        for key in ('fgsm/linf/0/1', 'pgd/linf/0/2'):
            for metric in ('mIoU', 'aAcc', 'mAcc'):
                assert cells[key][metric] == cells['clean'][metric]
            for a, b in zip(
                    areas_of(work, name, key), areas_of(work, name, 'clean')):
                assert np.array_equal(a, b)
            assert cells[key]['max_linf'] == 0
        for key in ('fgsm/linf/4/1', 'pgd/linf/4/2'):
            assert 0 < cells[key]['max_linf'] <= 4
            assert cells[key]['max_l2'] > 0
            assert cells[key]['mIoU'] <= cells['clean']['mIoU'] + 1e-9
            assert any(k.startswith('IoU.') for k in cells[key])
    assert data['settings']['labels'] == 'gt'
    for ext in ('md', 'csv', 'png'):
        assert osp.getsize(work / f'adversarial.{ext}') > 0


def test_grid_summary_against_an_independent_computation(attack_run):
    work, data = attack_run
    summary = data['summary']
    for name in ('ell', 'dot'):
        s = summary[name]
        cells = data['models'][name]['cells']
        assert s['clean'] == cells['clean']['mIoU']
        assert s['series']['pgd/linf/2']['4'] == cells['pgd/linf/4/2']['mIoU']
        for eps in ('0', '4'):
            keys = [f'fgsm/linf/{eps}/1', f'pgd/linf/{eps}/2']
            found = [areas_of(work, name, k) for k in keys]
            labelled = labelled_of(work, name, keys[0])
            worst = s['worst'][eps]
            assert worst['cells'] == keys
            choice = [keys.index(worst['choice'][str(i)]) for i in range(3)]
            assert switches_that_lower(found, choice) == []
            assert worst['mIoU'] == pytest.approx(
                miou_by_hand(*chosen_areas(found, choice)))
            assert worst['aAcc'] == pytest.approx(
                min_accuracy_by_hand(found, labelled)[1])
            # The stored labelled pixels are mmseg's: the clean aAcc.
            inter, _ = areas_of(work, name, 'clean')
            assert 100 * inter.sum() / labelled.sum() == pytest.approx(
                cells['clean']['aAcc'], abs=0.01)
        means = s['mean_over_eps']
        assert means['pgd/linf/2'] == pytest.approx(
            (cells['pgd/linf/0/2']['mIoU'] + cells['pgd/linf/4/2']['mIoU']) /
            2)
        assert means['worst'] == pytest.approx(
            (s['worst']['0']['mIoU'] + s['worst']['4']['mIoU']) / 2)
    assert summary['dot']['paired'] is None
    paired = summary['ell']['paired']

    def worst_of(n, e):
        keys = [f'fgsm/linf/{e}/1', f'pgd/linf/{e}/2']
        choice = [
            keys.index(summary[n]['worst'][e]['choice'][str(i)])
            for i in range(3)
        ]
        return chosen_areas([areas_of(work, n, k) for k in keys], choice)

    worst = {n: [worst_of(n, e) for e in ('0', '4')] for n in ('ell', 'dot')}
    want = paired_bootstrap([ImageAreas(*worst['ell'][1])],
                            [ImageAreas(*worst['dot'][1])], 100, 0)
    assert paired['worst']['4'] == pytest.approx(want)
    want = paired_bootstrap([ImageAreas(*w) for w in worst['ell']],
                            [ImageAreas(*w) for w in worst['dot']], 100, 0)
    assert paired['worst_mean'] == pytest.approx(want)
    text = (work / 'adversarial.md').read_text()
    assert 'not reliable below 30 images (3)' in text
    assert 'ell - dot, worst case, eps 4:' in text
    assert 'eps in 0-255 levels: 0 = 0/255 = 0, 4 = 4/255 = 0.01569;' in text
    assert 'ell, eps 4: mIoU' in text


#: A rerun of :data:`GRID` with any of these changes stored cells.
STALE = (
    ['--max-images', '2'],
    ['--step-size', '1'],
    ['--random-start'],
    ['--labels', 'prediction'],
    ['--cfg-options', 'model.test_cfg.mode=whole'],
    ['--seed', '1'],
    ['--norm', 'l2'],
)


def test_grid_resumes_and_refuses_stale_settings(demo_models, attack_run,
                                                 monkeypatch, capsys):
    tool = load_tool('analysis_tools/adversarial.py')
    work, data = attack_run
    argv = demo_models + GRID + [
        '--names', 'ell', 'dot', '--work-dir',
        str(work)
    ]

    def forbidden(*args, **kwargs):
        raise AssertionError('a finished cell was recomputed')

    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    again = tool.main(argv)
    assert same(again['models'], data['models'])
    # Every setting that changes a cell but is not in its key refuses the
    # stored results; so does another norm (one threat model per store).
    for extra in STALE:
        assert 'settings' in refused(capsys, tool.main, argv + extra), extra


def test_new_cells_for_new_eps_steps_and_adaptive(demo_models, tmp_path,
                                                  monkeypatch):
    tool = load_tool('analysis_tools/adversarial.py')
    base = demo_models[:2] + [
        '--attacks', 'pgd', '--max-images', '1', '--step-size', '2',
        '--work-dir',
        str(tmp_path)
    ]
    # As written in papers: 2/255 is the cell of 2 levels.
    first = tool.main(base + ['--epsilons', '2/255', '--steps', '1'])
    name, = first['models']
    kept = first['models'][name]['cells']
    assert sorted(kept) == ['clean', 'pgd/linf/2/1']
    ran = []
    run = CorruptionGridLoop.run

    def counting(self):
        ran.append(sorted(grid_loop.key_of(c) for c in self.cells))
        return run(self)

    monkeypatch.setattr(CorruptionGridLoop, 'run', counting)
    data = tool.main(base + ['--epsilons', '2', '4', '--steps', '1', '2'])
    assert ran == [['pgd/linf/2/2', 'pgd/linf/4/1', 'pgd/linf/4/2']]
    data = tool.main(base + ['--epsilons', '2', '--steps', '1', '--adaptive'])
    assert ran[-1] == ['pgd-adaptive/linf/2/1']
    for key, cell in kept.items():
        assert same(data['models'][name]['cells'][key], cell)


def test_bad_command_lines_build_nothing(demo_models, tmp_path, monkeypatch,
                                         capsys):
    tool = load_tool('analysis_tools/adversarial.py')

    def forbidden(*args, **kwargs):
        raise AssertionError('a model was built')

    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    monkeypatch.setattr('mmseg.registry.MODELS.build', forbidden)
    argv = demo_models + ['--work-dir', str(tmp_path / 'w')]
    for extra, words in (
        (['--epsilons', '-1'], "argument --epsilons: '-1' is not"),
        (['--epsilons', '256'], "'256' is above 255"),
        (['--epsilons', '8', '0.03'], 'argument --epsilons: 0.03 means '
         '0.03/255 here; for 0.03 of the range give 7.65'),
        (['--epsilons', '8/0'], "argument --epsilons: '8/0' is not"),
        (['--steps', '0'], "argument --steps: '0' is not"),
        (['--step-size', '0'], "argument --step-size: '0' is not"),
        (['--step-size', '-2'], "argument --step-size: '-2' is not"),
        (['--attacks', 'fgm'], "argument --attacks: invalid choice: 'fgm'"),
        (['--norm', 'l1'], "argument --norm: invalid choice: 'l1'"),
        (['--norm', 'l2', '--epsilons', '8'],
         'argument --epsilons: 8 is an L2 radius of 8 on the 0-1 scale'),
        (['--protocol', 'x'], "argument --protocol: invalid choice: 'x'"),
        (['--labels', 'y'], "argument --labels: invalid choice: 'y'"),
        (['--names', 'a', 'b', '--baseline',
          'c'], "argument --baseline: 'c' is none of the models ['a', 'b']"),
    ):
        assert words in refused(capsys, tool.main, argv + extra), extra
    # Meant: a radius below 0.25 levels, taken as written.
    monkeypatch.setattr('mmseg_elliptical.engine.fitting_models',
                        lambda *args: [])
    args = tool.parse_args(argv + ['--epsilons', '0.03', '--allow-small-eps'])
    assert args.epsilons == [0.03] and args.cells[0].eps == 0.03
    args = tool.parse_args(argv + [
        '--norm', 'l2', '--epsilons', '8', '--step-size', '1',
        '--allow-large-eps'
    ])
    assert args.epsilons == [8.] and args.cells[0].eps == 8.
    dot = demo_models[2:] + ['--adaptive', '--work-dir', str(tmp_path / 'w')]
    assert 'argument --adaptive: no model has an elliptical layer' in \
        refused(capsys, tool.main, dot)
    assert not osp.exists(tmp_path / 'w')


def test_protocol_cells():
    default = ATTACK_PROTOCOLS['default']
    assert default.attacks == ('pgd', 'segpgd', 'cospgd')
    assert default.epsilons == (0.25, 0.5, 1, 2, 4, 8)
    assert (default.steps, default.step_size, default.labels) == (20, 2.55,
                                                                  'gt')
    # Per image: 1 clean forward; 3 attacks x 6 eps x (20 steps + 1).
    assert default.passes() == (1 + 18 * 21, 18 * 20)
    paper = ATTACK_PROTOCOLS['paper']
    assert paper.step_ratio == 0.15 and paper.labels == 'prediction'
    # FGSM: 1 step + prediction + labels; PGD: 20 + 1 + 1; six eps each.
    assert paper.passes() == (1 + 6 * 3 + 6 * 22, 6 * 1 + 6 * 20)


@pytest.mark.slow
def test_two_processes_match_one_process(demo_models, attack_run, tmp_path):
    """tools/dist_adversarial.sh on 2 gloo processes gives the single
    process's cells and per-image areas."""
    work = tmp_path / 'dist'
    command = [
        'bash',
        osp.join(ROOT, 'tools', 'dist_adversarial.sh'), '2', *demo_models,
        *GRID, '--names', 'ell', 'dot', '--work-dir',
        str(work)
    ]
    run_command(command, env=launch_env())
    data = json.loads((work / 'adversarial.json').read_text())
    one = attack_run[1]
    for name in ('ell', 'dot'):
        for key in KEYS:
            a, b = data['models'][name]['cells'][key], one['models'][name][
                'cells'][key]
            for metric in ('mIoU', 'aAcc', 'mAcc', 'max_linf', 'max_l2'):
                assert a.get(metric) == b.get(metric), (name, key, metric)
            for x, y in zip(
                    areas_of(work, name, key),
                    areas_of(attack_run[0], name, key)):
                assert np.array_equal(x, y)


@pytest.mark.slow
def test_interrupted_grid_ends_with_the_same_cells(demo_models, attack_run,
                                                   tmp_path):
    """Killed after its first cells (SIGKILL, nothing to clean up) and run
    again: the same cells as one uninterrupted run."""
    script = osp.join(ROOT, 'tools', 'analysis_tools', 'adversarial.py')
    argv = [
        sys.executable, script, *demo_models, *GRID, '--names', 'ell', 'dot',
        '--work-dir',
        str(tmp_path)
    ]
    results = tmp_path / 'adversarial.json'
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS='1'))
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if results.exists() and cells_in(results) >= 3:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait(60)
    assert 3 <= cells_in(results) < 10
    run_command(argv)
    data = json.loads(results.read_text())
    for name in ('ell', 'dot'):
        for key in KEYS:
            assert data['models'][name]['cells'][key]['mIoU'] == \
                attack_run[1]['models'][name]['cells'][key]['mIoU']


def cells_in(path) -> int:
    """Finished cells in an adversarial.json (written atomically)."""
    data = json.loads(path.read_text())
    return sum(len(m['cells']) for m in data['models'].values())


MASK_CONFIGS = [
    'mask2former/mask2former_elliptical-swin-t_8xb2-160k_ade20k-512x512.py',
    'mask2former/mask2former_elliptical-swin-t_elliptical-mask_8xb2-160k_'
    'ade20k-512x512.py',
    'maskformer/maskformer_elliptical-swin-t_upernet_8xb2-160k_ade20k-'
    '512x512.py',
    'maskformer/maskformer_elliptical-swin-t_elliptical-mask_8xb2-160k_'
    'ade20k-512x512.py',
]


def check_on_random_image(model_cfg, attack: attacks.Attack) -> None:
    """:func:`check_against_hand` on the model of ``model_cfg`` (built from
    seed 0, eval mode) and a random 64 x 64 image with 150-class labels."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(model_cfg)
    model.init_weights()
    model.eval()
    images = torch.randint(
        0,
        256, (1, 3, 64, 64),
        generator=torch.Generator().manual_seed(2),
        dtype=torch.uint8)
    batch = dict(inputs=list(images), data_samples=seg_samples(1, 64, 64, 150))
    check_against_hand(model, batch, attack)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MMDET, reason='needs mmdet (the extra)')
@pytest.mark.parametrize('path', MASK_CONFIGS)
def test_attacks_on_mask_classification_models(path):
    """MaskFormer and Mask2Former, with mmseg's or the elliptical decoder:
    the attack equals the hand-written one (adaptive on the elliptical
    decoders)."""
    attack = attacks.Attack(
        'segpgd', 'linf', 4, 2, 2., adaptive='elliptical-mask' in path)
    check_on_random_image(
        tiny_mask_model(osp.join(ROOT, 'configs', path), 64, 16), attack)


#: One shipped config per decode head of the ViT, MiT and PCPVT families.
HEAD_CONFIGS = {
    'setr-naive':
    'setr/setr_elliptical-vit-l_naive_8xb2-160k_ade20k-512x512.py',
    'setr-pup':
    'setr/setr_elliptical-vit-l_pup_8xb2-160k_ade20k-512x512.py',
    'setr-mla':
    'setr/setr_elliptical-vit-l_mla_8xb2-160k_ade20k-512x512.py',
    'dpt':
    'dpt/dpt_elliptical-vit-b16_8xb2-160k_ade20k-512x512.py',
    'vit-upernet':
    'vit/vit_elliptical-deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py',
    'segformer':
    'segformer/segformer_elliptical-mit-b0_8xb2-160k_ade20k-512x512.py',
    'twins-upernet':
    'twins/twins_elliptical-pcpvt-s_uperhead_8xb4-160k_ade20k-512x512.py',
}


@pytest.mark.parametrize('head', sorted(HEAD_CONFIGS))
def test_attacks_through_every_decode_head(head):
    """SETR (naive, PUP, MLA), DPT, UPerNet, SegFormer's and Twins' heads on
    their shipped configs (tiny, with their own test_cfg): the adaptive
    CosPGD equals the hand-written one."""
    check_on_random_image(
        tiny_head_model(
            Config.fromfile(osp.join(ROOT, 'configs',
                                     HEAD_CONFIGS[head])).model, 64),
        attacks.Attack('cospgd', 'linf', 4, 2, 2., adaptive=True))


def test_ctrl_c_keeps_the_finished_cells(demo_models, tmp_path, monkeypatch,
                                         capsys):
    """Ctrl-C in the middle of a grid: one line saying how many cells are
    kept and that the same command resumes; it does."""
    from mmseg_elliptical.robustness.grid import run as grid
    tool = load_tool('analysis_tools/adversarial.py')
    argv = demo_models[:2] + [
        '--attacks', 'pgd', '--epsilons', '2', '4', '--steps', '1',
        '--step-size', '2', '--max-images', '1', '--names', 'ell',
        '--work-dir',
        str(tmp_path)
    ]
    record = grid.record_cell

    def interrupted_after_two(store, *args):
        record(store, *args)
        if len(store.data['models']['ell']['cells']) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(grid, 'record_cell', interrupted_after_two)
    capsys.readouterr()
    with pytest.raises((SystemExit, KeyboardInterrupt)) as stop:
        tool.main(argv)
    err = capsys.readouterr().err
    assert isinstance(stop.value, SystemExit), stop.value
    assert stop.value.code == 130 and 'Traceback' not in err, err
    assert err.strip().splitlines()[-1].endswith(
        f'interrupted: 2 finished cells are kept in {tmp_path}/'
        'adversarial.json; the same command resumes from them'), err
    monkeypatch.setattr(grid, 'record_cell', record)
    ran = []
    run = CorruptionGridLoop.run

    def counting(self):
        ran.append(sorted(grid_loop.key_of(c) for c in self.cells))
        return run(self)

    monkeypatch.setattr(CorruptionGridLoop, 'run', counting)
    data = tool.main(argv)
    assert ran == [['pgd/linf/4/1']]
    assert sorted(data['models']['ell']['cells']) == [
        'clean', 'pgd/linf/2/1', 'pgd/linf/4/1'
    ]


def test_models_on_different_test_images_are_not_paired(
        demo_models, demo_root, tmp_path, capsys):
    """The store records each model's test images; two models evaluated on
    different ones (the same count) are refused a paired verdict in one
    line."""
    import shutil
    other_root = tmp_path / 'other_data'
    shutil.copytree(demo_root, other_root)
    cfg = Config.fromfile(demo_models[2])
    cfg.test_dataloader.dataset.data_root = str(other_root)
    other = str(tmp_path / 'other.py')
    cfg.dump(other)
    tool = load_tool('analysis_tools/adversarial.py')
    argv = [
        demo_models[0], demo_models[1], other, demo_models[3], '--names',
        'ell', 'dot', '--attacks', 'fgsm', '--epsilons', '2', '--max-images',
        '2', '--resamples', '10', '--work-dir',
        str(tmp_path / 'w')
    ]
    line = refused(capsys, tool.main, argv)
    image = osp.join('images', 'validation', 'demo_00000.jpg')
    assert line.endswith(
        'The test sets differ: ell was evaluated on 2 images, dot on 2 '
        f'(image 0: {osp.join(demo_root, image)} against '
        f'{osp.join(other_root, image)}); a paired comparison needs the same '
        'images: give the models configs with the same test data.'), line
    data = json.loads((tmp_path / 'w' / 'adversarial.json').read_text())
    assert data['models']['ell']['images'] == [
        osp.join(demo_root, 'images', 'validation', f'demo_0000{i}.jpg')
        for i in range(2)
    ]
    # The same images: paired as before.
    argv[2] = demo_models[2]
    summary = tool.main(argv[:-1] + [str(tmp_path / 'same')])['summary']
    assert summary['ell']['paired']['worst']['2'] is not None


def test_unequal_image_counts_in_an_old_store_are_named():
    from mmseg_elliptical.robustness.statistics.paired import bootstrap_or_note
    notes = []
    three, two = (ImageAreas(np.ones((n, 2)), np.ones((n, 2))) for n in (3, 2))
    assert bootstrap_or_note([three], [two], 'clean', notes, 10, 0) is None
    assert notes == [
        'No paired test on clean: the test sets differ (3 against 2 '
        'images).'
    ]


def test_adaptive_curves_show_beside_their_plain_twins():
    """adversarial.png: an adaptive curve on its plain twin's values stays
    visible (its own markers and dashes, nudged right at eps > 0)."""
    from mmseg_elliptical.robustness.attacks.report import attack_curves
    values = {'1': 50., '4': 30.}
    summary = dict(
        ell=dict(
            clean=70.,
            series={
                'pgd/linf/5': values,
                'pgd-adaptive/linf/5': dict(values)
            },
            worst={
                e: dict(mIoU=v)
                for e, v in values.items()
            }))
    fig = attack_curves(summary, 'linf')
    lines = {
        line.get_label().split(': ')[1]: line
        for line in fig.axes[0].get_lines()
    }
    plain, adaptive = lines['pgd/linf/5'], lines['pgd-adaptive/linf/5']
    assert list(plain.get_ydata()) == list(adaptive.get_ydata())
    xp, xa = list(plain.get_xdata()), list(adaptive.get_xdata())
    assert xp == [0., 1., 4.] and xa[0] == 0.
    assert all(a > p for a, p in zip(xa[1:], xp[1:]))
    assert max(a - p for a, p in zip(xa, xp)) < 0.1  # within 2.5 % of eps
    assert plain.get_marker() != adaptive.get_marker()
    assert plain.get_linestyle() != adaptive.get_linestyle()
    import matplotlib.pyplot as plt
    plt.close(fig)
