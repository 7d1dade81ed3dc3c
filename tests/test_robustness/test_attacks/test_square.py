"""The query attack (Square Attack for segmentation): outputs only, no
gradient; at the ball's vertices; it never raises the pixel accuracy it
tracks; seeded per image; the original's window schedule."""
import math
import os
import subprocess
import sys

import pytest
import torch
from builders import ROOT
from processes import load_tool, refused
from saved_models import first_images, load_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.errors import AnalysisError
from mmseg_elliptical.robustness.attacks import pgd as attacks
from mmseg_elliptical.robustness.attacks import square


def batch_of(config: str, images: int = 2) -> dict:
    found = list(first_images(config, images))
    return dict(
        inputs=[x for b in found for x in b['inputs']],
        data_samples=[s for b in found for s in b['data_samples']])


def right_pixels(model, xs, samples) -> list:
    """Labelled pixels the model classifies right, per image (through
    ``test_step``, as the evaluator sees them)."""
    with torch.no_grad():
        out = model.test_step(dict(inputs=xs, data_samples=samples))
    found = []
    for o, s in zip(out, samples):
        label = s.gt_sem_seg.data[0]
        valid = label != 255
        found.append(int(((o.pred_sem_seg.data[0] == label) & valid).sum()))
    return found


def p_selection(p_init: float, it: int, n_iters: int) -> float:
    """The original Square Attack's schedule of p, as its code writes it."""
    it = int(it / n_iters * 10000)
    for top, div in ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16),
                     (2000, 32), (4000, 64), (6000, 128), (8000, 256)):
        if it <= top:
            return p_init / div
    return p_init / 512


@pytest.mark.parametrize('queries', [1, 7, 100, 5000])
def test_window_follows_the_original_schedule(queries):
    for q in range(0, queries, max(1, queries // 50)):
        side = round(math.sqrt(p_selection(0.05, q, queries) * 64 * 48))
        assert square.window_side(q, queries, 64, 48) == max(1, min(side, 47))


def test_square_reads_outputs_only(demo_models, monkeypatch):
    model = load_model(demo_models[:2])
    model.eval()
    batch = batch_of(demo_models[0])

    def forbidden(*args, **kwargs):
        raise AssertionError('the query attack computed a gradient')

    seen = []
    model.backbone.register_forward_hook(
        lambda *args: seen.append(torch.is_grad_enabled()))
    monkeypatch.setattr(torch.autograd, 'grad', forbidden)
    monkeypatch.setattr(torch.Tensor, 'backward', forbidden)
    attack = attacks.Attack('square', 'linf', 8, 20, 1.)
    with torch.enable_grad():
        xs = attacks.perturb(model, batch['inputs'], batch['data_samples'],
                             attack)
    assert seen and not any(seen)
    assert all(not x.requires_grad for x in xs)
    assert all(p.grad is None for p in model.parameters())
    for x, img in zip(xs, batch['inputs']):
        delta = x - img.float()
        assert delta.abs().max() <= 8 and 0 <= x.min() and x.max() <= 255
        inside = (x > 0) & (x < 255)  # not clamped: 0 or at a vertex
        moved = delta[inside].abs()
        assert bool(((moved == 0) | (moved == 8)).all())


def test_square_never_raises_the_accuracy_and_is_seeded(demo_models):
    model = load_model(demo_models[:2])
    model.eval()
    batch = batch_of(demo_models[0])
    samples = batch['data_samples']

    def run(queries, seed=0):
        return attacks.perturb(
            model, batch['inputs'], samples,
            attacks.Attack('square', 'linf', 16, queries, 1., seed=seed))

    # More queries continue the same trajectory (the same draws first).
    one, many = run(1), run(30)
    clean = right_pixels(model, [x.float() for x in batch['inputs']], samples)
    for a, b, c in zip(
            right_pixels(model, many, samples),
            right_pixels(model, one, samples), clean):
        assert a <= b <= c  # never above the clean image's
    assert sum(right_pixels(model, many, samples)) < sum(clean)
    again = run(30)
    assert all(torch.equal(a, b) for a, b in zip(many, again))
    assert not all(torch.equal(a, b) for a, b in zip(many, run(30, 1)))
    alone = attacks.perturb(model, batch['inputs'][1:], samples[1:],
                            attacks.Attack('square', 'linf', 16, 30, 1.))
    torch.testing.assert_close(alone[0], many[1])
    zero = attacks.perturb(model, batch['inputs'], samples,
                           attacks.Attack('square', 'linf', 0, 3, 1.))
    assert all(
        torch.equal(z, x.float()) for z, x in zip(zero, batch['inputs']))


@pytest.mark.parametrize('kwargs', [dict(norm='l2'), dict(adaptive=True)])
def test_square_refuses_l2_and_adaptive(kwargs):
    attack = attacks.Attack(**dict(
        dict(name='square', norm='linf', eps=4, steps=2, step_size=1.), **
        kwargs))
    with pytest.raises(AnalysisError, match='L-inf'):
        square.square_perturb(torch.nn.Linear(1, 1), [], [], attack)


def test_square_cells_in_the_grid(demo_models, tmp_path, capsys):
    """``square/linf/EPS/QUERIES`` beside the gradient attacks, never
    adaptive, and in the worst case at its eps; bad input in one line."""
    tool = load_tool('analysis_tools/adversarial.py')
    argv = demo_models + [
        '--names', 'ell', 'dot', '--attacks', 'pgd', 'square', '--epsilons',
        '4', '--steps', '1', '--step-size', '2', '--max-images', '2'
    ]
    data = tool.main(
        argv + ['--queries', '3', '--adaptive', '--work-dir',
                str(tmp_path)])
    cells = data['models']
    assert sorted(cells['ell']['cells']) == [
        'clean', 'pgd-adaptive/linf/4/1', 'pgd/linf/4/1', 'square/linf/4/3'
    ]
    assert sorted(
        cells['dot']['cells']) == ['clean', 'pgd/linf/4/1', 'square/linf/4/3']
    assert 0 < cells['ell']['cells']['square/linf/4/3']['max_linf'] <= 4
    worst = data['summary']['ell']['worst']['4']
    assert sorted(worst['cells']) == sorted(k for k in cells['ell']['cells']
                                            if k != 'clean')
    for extra, words in (
        (['--queries', '0'], 'argument --queries'),
        (['--norm', 'l2', '--epsilons', '0.5'], 'square attack is L-inf'),
    ):
        assert words in refused(capsys, tool.main, argv + extra), extra


def test_draws_do_not_depend_on_where_the_data_lies(demo_models, demo_root,
                                                    tmp_path):
    """The square attack and the random start draw per image from its path
    under the data root: the same test images in another folder give the
    same cells (they drew from the absolute path, so a cell changed with
    pytest's temporary folder)."""
    import shutil

    from mmseg_elliptical.robustness.attacks.keys import image_key
    tool = load_tool('analysis_tools/adversarial.py')
    moved = tmp_path / 'elsewhere' / 'demo_shapes'
    shutil.copytree(demo_root, moved)
    argv = demo_models[:2] + [
        '--attacks', 'pgd', 'square', '--epsilons', '4', '--steps', '2',
        '--step-size', '2', '--queries', '5', '--random-start', '--max-images',
        '2'
    ]
    cells = [
        tool.main(argv + ['--work-dir', str(tmp_path / name)] +
                  extra)['models']['ell']['cells']
        for name, extra in (('here', []), (
            'there',
            ['--cfg-options', f'test_dataloader.dataset.data_root={moved}']))
    ]
    for key in ('pgd/linf/4/2', 'square/linf/4/5'):
        assert cells[0][key]['mIoU'] == cells[1][key]['mIoU'], key
        assert cells[0][key]['max_linf'] == cells[1][key]['max_linf'], key
    assert image_key(f'{moved}/images/validation/a.jpg',
                     str(moved)) == 'images/validation/a.jpg'
    assert image_key('/other/a.jpg', str(moved)) == '/other/a.jpg'


#: The square check of :func:`test_square_reads_outputs_only`, in a fresh
#: interpreter that imports the white-box attacks only.
FRESH = '''
import sys
import torch
sys.path.insert(0, "tests")
import mmseg_elliptical  # noqa: F401
from saved_models import first_images, load_model
from mmseg_elliptical.robustness.attacks import pgd
paths = sys.argv[1:3]
model = load_model(paths)
model.eval()
batch = next(iter(first_images(paths[0], 2)))
xs = pgd.perturb(model, batch["inputs"], batch["data_samples"],
                 pgd.Attack("square", "linf", 8, 20, 1.))
moved = [(x - i.float()).abs()[(x > 0) & (x < 255)] for x, i in
         zip(xs, batch["inputs"])]
print(all(bool(((m == 0) | (m == 8)).all()) for m in moved))
'''


@pytest.mark.slow
def test_perturb_runs_square_with_nothing_imported_before(demo_models):
    """A ``square`` cell is the Square Attack wherever ``perturb`` is
    called from: once a registry filled when ``square`` was imported
    sent it, where nothing had imported that module (the adversarial
    tool), to PGD's loop of 1000 steps, silently."""
    proc = subprocess.run([sys.executable, '-c', FRESH, *demo_models[:2]],
                          cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.stdout.strip().splitlines()[-1:] == ['True'
                                                     ], proc.stderr[-3000:]
