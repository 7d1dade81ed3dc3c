"""Certification cells on the tiny demo models: the certified pixels equal
an independent transcription of SegCertify (its own draws, one copy at a
time), and the grid's certified mIoU, aAcc, abstain rate and per-image areas
equal hand computations over them; a rerun resumes."""
import json
import os.path as osp

import numpy as np
import pytest
from arm_oracles import hierarchical_by_hand
from attack_oracles import miou_by_hand
from builders import DEMO_DOT, DEMO_ELLIPTICAL, ROOT, demo_config
from processes import launch_env, load_tool, run_command
from saved_models import first_images, load_model, save_model
from segcertify_oracle import noisy_samples, segcertify

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.robustness.attacks.keys import sample_keys
from mmseg_elliptical.robustness.certification.cells import certification_cells
from mmseg_elliptical.robustness.certification.loop import certify_image
from mmseg_elliptical.robustness.grid.run import run_cells
from mmseg_elliptical.robustness.grid.store import ResultStore
from mmseg_elliptical.robustness.statistics.bootstrap import paired_bootstrap
from mmseg_elliptical.utils.config import ModelSpec

N0, N, ALPHA, SEED = 3, 40, 0.05, 4
#: Two noise levels; the taus give both certified and abstaining pixels.
CELLS = certification_cells([0.1, 0.25], [0.55, 0.8], ['holm', 'bonferroni'],
                            N0,
                            N,
                            ALPHA,
                            SEED,
                            batch=8)


def oracle_labels(model, image, sample, key, cell):
    samples = noisy_samples(model, image, sample, cell.sigma, N0 + N, key,
                            SEED)
    labels, _ = segcertify(samples, N0, N, cell.tau, ALPHA, cell.correction)
    return labels.reshape(sample.gt_sem_seg.data.shape[-2:])


def test_certified_pixels_equal_the_transcription(demo_models):
    model = load_model(demo_models[:2])
    batch = next(iter(first_images(demo_models[0], 1)))
    image, sample = batch['inputs'][0], batch['data_samples'][0]
    got = certify_image(model, image, sample, 'scene.jpg', CELLS[:4])
    abstained = []
    for cell, labels in zip(CELLS[:4], got):
        want = oracle_labels(model, image, sample, 'scene.jpg', cell)
        np.testing.assert_array_equal(labels.numpy(), want, err_msg=cell.key)
        abstained.append((want == -1).mean())
    assert min(abstained) < 0.9 and max(abstained) > 0.1, abstained
    with pytest.raises(ValueError, match='one noise level'):
        certify_image(model, image, sample, 'scene.jpg', CELLS[3:5])


def hand_cell(model, batches, root, cell):
    """Areas per image, aAcc and the abstain rate of a cell, by hand."""
    inter, union, right, labelled, abstain, pixels = [], [], 0, 0, 0, 0
    for batch in batches:
        samples = batch['data_samples']
        for image, sample, key in zip(batch['inputs'], samples,
                                      sample_keys(samples, root)):
            pred = oracle_labels(model, image, sample, key, cell)
            gt = sample.gt_sem_seg.data[0].numpy()
            valid = gt != 255
            i = np.bincount(gt[valid & (pred == gt)], minlength=5)
            p = np.bincount(pred[valid & (pred >= 0)], minlength=5)
            g = np.bincount(gt[valid], minlength=5)
            inter.append(i)
            union.append(g + p - i)
            right, labelled = right + i.sum(), labelled + valid.sum()
            abstain, pixels = abstain + (pred == -1).sum(), pixels + pred.size
    return (np.array(inter), np.array(union), 100 * right / labelled,
            abstain / pixels)


def test_grid_cells_equal_the_hand_computation_and_resume(
        demo_models, tmp_path):
    specs = [
        ModelSpec('ell', *demo_models[:2]),
        ModelSpec('dot', *demo_models[2:])
    ]
    cells = [(None, None), *CELLS[:2], CELLS[4]]
    path = str(tmp_path / 'certify.json')
    store = run_cells(specs, cells, path, str(tmp_path), max_images=2)
    loader = first_images(demo_models[0], 2)
    root = loader.dataset.data_root
    for spec in specs:
        model = load_model([spec.config, spec.checkpoint])
        for cell in cells[1:]:
            inter, union, acc, abstain = hand_cell(model, loader, root, cell)
            got = store.get(spec.name, cell.key)
            areas = store.areas(spec.name, cell.key)
            np.testing.assert_array_equal(areas.intersect, inter)
            np.testing.assert_array_equal(areas.union, union)
            assert got['mIoU'] == pytest.approx(
                miou_by_hand(inter, union), abs=0.006)
            assert got['aAcc'] == pytest.approx(acc, abs=0.006)
            assert got['abstain'] == pytest.approx(abstain, abs=1e-4)
            assert got['radius'] == pytest.approx(cell.radius, abs=1e-4)
    before = json.loads(open(path).read())
    again = run_cells(specs, cells, path, str(tmp_path), max_images=2)
    assert json.loads(json.dumps(again.data)) == before  # nothing re-run


def test_tool_reports_the_store_and_the_arms_paired_verdict(
        demo_models, tmp_path):
    """``certify.py`` on both models: its tables and CSV hold the store's
    numbers, its figure is written, and the arms' verdict on each cell is
    the paired bootstrap of the stored per-image areas (one run per arm)."""
    data = load_tool('analysis_tools/certify.py').main(demo_models + [
        '--names', 'ell', 'dot', '--sigmas', '0.1', '--taus', '0.55', '0.8',
        '--n0', '3', '--samples', '40', '--alpha', '0.05', '--corrections',
        'holm', '--max-images', '2', '--noise-batch', '16', '--work-dir',
        str(tmp_path)
    ])
    assert data['settings']['n'] == 40 and data['settings']['n0'] == 3
    store = ResultStore(str(tmp_path / 'certify.json'), data['settings'])
    verdicts = json.loads((tmp_path / 'certify_verdicts.json').read_text())
    keys = ['clean', 'certify/0.1/0.55/holm', 'certify/0.1/0.8/holm']
    for run in ('ell', 'dot'):
        assert set(data['models'][run]['cells']) == set(keys)
        rows = verdicts['runs'][run]['rows']
        assert [r['key'] for r in rows] == keys[1:]
        for row in rows:
            cell = store.get(run, row['key'])
            assert (row['mIoU'], row['abstain']) == (cell['mIoU'],
                                                     cell['abstain'])
    csv = (tmp_path / 'certify.csv').read_text().splitlines()
    assert csv[0] == 'model,sigma,tau,correction,radius,mIoU,aAcc,abstain'
    assert len(csv) == 1 + 2 * 2
    assert (tmp_path / 'certify.png').stat().st_size > 10_000
    paired = verdicts['arms']['ell']['paired']
    for key in keys:
        want = paired_bootstrap([store.areas('ell', key)],
                                [store.areas('dot', key)])
        for k in ('difference', 'low', 'high'):
            assert paired[key][k] == pytest.approx(want[k], abs=1e-9)
    assert 'certify/0.1/0.55/holm' in (tmp_path / 'certify.md').read_text()


@pytest.mark.slow
def test_two_processes_match_one_process(demo_models, tmp_path):
    """tools/dist_certify.sh on 2 gloo processes and 3 images (one repeated
    by the sampler to even out the processes) gives the single process's
    cells, abstain rates and per-image areas: the draws follow the image,
    not the process."""
    grid = demo_models + [
        '--names', 'ell', 'dot', '--sigmas', '0.1', '--taus', '0.55', '--n0',
        '3', '--samples', '40', '--alpha', '0.05', '--corrections', 'holm',
        '--max-images', '3'
    ]
    one = load_tool('analysis_tools/certify.py').main(
        grid + ['--work-dir', str(tmp_path / 'one')])
    run_command([
        'bash',
        osp.join(ROOT, 'tools', 'dist_certify.sh'), '2', *grid, '--work-dir',
        str(tmp_path / 'dist')
    ],
                env=launch_env())
    two = json.loads((tmp_path / 'dist' / 'certify.json').read_text())
    for name in ('ell', 'dot'):
        for key in ('clean', 'certify/0.1/0.55/holm'):
            a, b = (x['models'][name]['cells'][key] for x in (one, two))
            for metric in ('mIoU', 'aAcc', 'mAcc', 'abstain'):
                assert a.get(metric) == b.get(metric), (name, key, metric)
            for part in ('intersect', 'union'):
                x, y = (
                    np.load(tmp_path / d / 'areas' / name / f'{key}.npz')[part]
                    for d in ('one', 'dist'))
                assert np.array_equal(x, y)


def test_arms_of_two_runs_get_the_hierarchical_verdict(demo_models, demo_root,
                                                       tmp_path):
    """Two runs per name (the demo models and a second initialisation of
    each): every certified cell's arm test is the two-level bootstrap of
    the stored areas, computed by hand."""
    second = []
    for name, path in (('ell', DEMO_ELLIPTICAL), ('dot', DEMO_DOT)):
        cfg = demo_config(path, demo_root, str(tmp_path / f'wd_{name}'))
        second += save_model(cfg, str(tmp_path / f'{name}1.py'), seed=1)
    models = demo_models[:2] + second[:2] + demo_models[2:] + second[2:]
    load_tool('analysis_tools/certify.py').main(models + [
        '--names', 'ell', 'ell', 'dot', 'dot', '--sigmas', '0.1', '--taus',
        '0.55', '--n0', '3', '--samples', '40', '--alpha', '0.05',
        '--corrections', 'holm', '--max-images', '3', '--resamples', '200',
        '--work-dir',
        str(tmp_path / 'work')
    ])
    verdicts = json.loads(
        (tmp_path / 'work' / 'certify_verdicts.json').read_text())
    arm = verdicts['arms']['ell']
    assert arm['runs'] == ['ell#0', 'ell#1'] and arm['baseline'] == 'dot'
    data = json.loads((tmp_path / 'work' / 'certify.json').read_text())
    store = ResultStore(
        str(tmp_path / 'work' / 'certify.json'), data['settings'])
    for key in ('clean', 'certify/0.1/0.55/holm'):
        a, b = ([[store.areas(run, key)] for run in runs]
                for runs in (['ell#0', 'ell#1'], ['dot#0', 'dot#1']))
        want = hierarchical_by_hand(a, b, 200, 0)
        got = arm['paired'][key]
        assert got['runs'] == [2, 2]
        for k in ('difference', 'low', 'high'):
            assert got[k] == pytest.approx(want[k], abs=1e-9), (key, k)
