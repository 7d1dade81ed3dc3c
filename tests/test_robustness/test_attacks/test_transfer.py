"""Transfer cells: the target model evaluated on the adversarial images
crafted on the source, against the hand-written attack and evaluation; bad
``--transfer`` names in one line."""
import json
import os.path as osp

import numpy as np
import pytest
import torch
from attack_oracles import attack_by_hand, logits_by_hand
from builders import ROOT
from processes import launch_env, load_tool, refused, run_command
from saved_models import first_images, load_model

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.models import adaptive_relevance

ARGS = [
    '--names', 'ell', 'dot', '--attacks', 'pgd', '--epsilons', '4', '--steps',
    '1', '--step-size', '2', '--max-images', '2'
]


def areas_by_hand(pred: torch.Tensor, gt: torch.Tensor, classes: int):
    """Intersect and union per class of one image (label 255 ignored)."""
    keep = gt != 255
    inter = [
        int(((pred == c) & (gt == c) & keep).sum()) for c in range(classes)
    ]
    union = [
        int((((pred == c) | (gt == c)) & keep).sum()) for c in range(classes)
    ]
    return inter, union


def test_transfer_cell_equals_the_target_on_the_source_images(
        demo_models, tmp_path):
    tool = load_tool('analysis_tools/adversarial.py')
    data = tool.main(
        demo_models + ARGS +
        ['--adaptive', '--transfer', 'ell', '--work-dir',
         str(tmp_path)])
    keys = ['pgd-adaptive@ell/linf/4/1', 'pgd@ell/linf/4/1']
    assert sorted(data['models']['dot']['cells']) == sorted(
        ['clean', 'pgd/linf/4/1', *keys])
    assert sorted(data['models']['ell']['cells']) == [
        'clean', 'pgd-adaptive/linf/4/1', 'pgd/linf/4/1'
    ]
    assert sorted(data['summary']['dot']['worst']['4']['cells']) == sorted(
        ['pgd/linf/4/1', *keys])
    source, target = load_model(demo_models[:2]), load_model(demo_models[2:])
    source.eval()
    target.eval()
    classes = len(target.dataset_meta['classes'])
    for key, adaptive in zip(keys, (True, False)):
        inter, union = [], []
        for batch in first_images(demo_models[0], 2):
            img, sample = batch['inputs'][0], batch['data_samples'][0]
            gt = sample.gt_sem_seg.data[0]
            with adaptive_relevance(source, adaptive):
                x = attack_by_hand(source, img, sample.metainfo, gt, 'pgd',
                                   'linf', 4, 1, 2.)
            with torch.no_grad():
                pred = logits_by_hand(target, x, sample.metainfo).argmax(0)
            i, u = areas_by_hand(pred, gt, classes)
            inter.append(i)
            union.append(u)
        with np.load(tmp_path / 'areas' / 'dot' / f'{key}.npz') as f:
            assert np.array_equal(f['intersect'], np.array(inter)), key
            assert np.array_equal(f['union'], np.array(union)), key
        cell = data['models']['dot']['cells'][key]
        assert 0 < cell['max_linf'] <= 4
    # The plain transfer differs from the adaptive one on an elliptical
    # source, and from the target's own white-box attack.
    with np.load(tmp_path / 'areas' / 'dot' / f'{keys[1]}.npz') as a, \
            np.load(tmp_path / 'areas' / 'dot' / 'pgd/linf/4/1.npz') as b:
        assert not np.array_equal(a['intersect'], b['intersect'])


def test_a_transfer_from_the_model_itself_is_its_white_box_cell(
        demo_models, tmp_path):
    """The same checkpoint under two names: the transfer from one to the
    other crafts the very images of the white-box attack, so its areas are
    the white-box cell's, pixel for pixel (a transfer cell that differs
    from it would be evaluating something else)."""
    tool = load_tool('analysis_tools/adversarial.py')
    same = demo_models[:2] * 2
    argv = ['self' if a == 'dot' else a for a in ARGS]
    data = tool.main(same + argv +
                     ['--transfer', 'ell', '--work-dir',
                      str(tmp_path)])
    assert 'pgd@ell/linf/4/1' in data['models']['self']['cells']
    areas = tmp_path / 'areas'
    with np.load(areas / 'self' / 'pgd@ell/linf/4/1.npz') as a, \
            np.load(areas / 'self' / 'pgd/linf/4/1.npz') as b, \
            np.load(areas / 'ell' / 'pgd/linf/4/1.npz') as c:
        assert a['intersect'].sum() > 0
        for k in ('intersect', 'union'):
            assert np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k])
    cells = data['models']['self']['cells']
    assert cells['pgd@ell/linf/4/1']['aAcc'] == cells['pgd/linf/4/1']['aAcc']


@pytest.mark.parametrize('extra, words', [
    (['--transfer', 'nope'], "argument --transfer: 'nope' is none"),
])
def test_bad_transfer_is_refused(extra, words, demo_models, capsys):
    tool = load_tool('analysis_tools/adversarial.py')
    assert words in refused(capsys, tool.main, demo_models + ARGS + extra)
    one = demo_models[:2] + ['--transfer', 'elliptical']
    assert 'no other model' in refused(capsys, tool.main, one)


@pytest.mark.slow
def test_two_processes_give_the_single_process_cells(demo_models, tmp_path):
    """Transfer and square cells on 2 processes (each crafts its share of
    the images on the source) equal one process's."""
    argv = ARGS + [
        '--attacks', 'pgd', 'square', '--queries', '3', '--transfer', 'ell'
    ]
    one = load_tool('analysis_tools/adversarial.py').main(
        demo_models + argv +
        ['--work-dir', str(tmp_path / 'one')])
    run_command([
        'bash',
        osp.join(ROOT, 'tools', 'dist_adversarial.sh'), '2', *demo_models,
        *argv, '--work-dir',
        str(tmp_path / 'two')
    ],
                env=launch_env())
    two = json.loads((tmp_path / 'two' / 'adversarial.json').read_text())
    cells = two['models']['dot']['cells']
    assert {'pgd@ell/linf/4/1', 'square@ell/linf/4/3'} <= set(cells)
    for name in ('ell', 'dot'):
        for key, cell in one['models'][name]['cells'].items():
            for metric in ('mIoU', 'aAcc', 'max_linf'):
                assert two['models'][name]['cells'][key].get(metric) == \
                    cell.get(metric), (name, key, metric)
