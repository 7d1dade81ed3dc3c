"""SEA's worst case over attack cells against loops and a brute force:
the greedy mIoU search ends at a local optimum, no lower than the global
one, its aAcc is the per-image minimum accuracy, and the store keeps the
labelled pixels it needs (older stores still load)."""
import numpy as np
import pytest
from attack_oracles import (chosen_areas, lowest_miou_brute_force,
                            min_accuracy_by_hand, miou_by_hand,
                            switches_that_lower)

from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.analysis.robustness.verdicts.summary import \
    attack_model_summary
from mmseg_elliptical.analysis.robustness.verdicts.worst import (
    greedy_worst_case, worst_record)

CLASSES = 4


def areas_of_maps(pred: np.ndarray, label: np.ndarray) -> tuple:
    """Per-image intersect and union per class, and labelled pixels, of
    ``[images, pixels]`` maps (label 255: ignored), with loops."""
    inter = np.zeros((len(pred), CLASSES), np.int64)
    union = np.zeros_like(inter)
    for i, (p, lb) in enumerate(zip(pred, label)):
        keep = lb != 255
        for c in range(CLASSES):
            inter[i, c] = np.sum((p == c) & (lb == c) & keep)
            union[i, c] = np.sum(((p == c) | (lb == c)) & keep)
    return inter, union, (label != 255).sum(1)


def random_cells(seed: int,
                 images: int = 5,
                 cells: int = 3,
                 pixels: int = 12) -> tuple:
    """``cells`` predictions of the same labelled images."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, CLASSES, (images, pixels))
    label[rng.random(label.shape) < 0.15] = 255
    out = []
    for _ in range(cells):
        pred = np.where(
            rng.random(label.shape) < rng.random(), label,
            rng.integers(0, CLASSES, label.shape))
        out.append(areas_of_maps(pred, label))
    return [(i, u) for i, u, _ in out], out[0][2]


@pytest.mark.parametrize('seed', range(6))
def test_greedy_is_a_local_optimum_no_lower_than_brute_force(seed):
    cells, labelled = random_cells(seed)
    got = greedy_worst_case([rb.ImageAreas(*c) for c in cells], labelled)
    choice = [int(c) for c in got.choice]
    assert switches_that_lower(cells, choice) == []
    assert got.miou == pytest.approx(
        miou_by_hand(*chosen_areas(cells, choice)))
    assert got.miou >= lowest_miou_brute_force(cells) - 1e-9
    start, _ = min_accuracy_by_hand(cells, labelled)
    assert got.miou <= miou_by_hand(*chosen_areas(cells, start)) + 1e-9
    assert np.array_equal(got.areas.intersect, chosen_areas(cells, choice)[0])
    assert np.array_equal(got.areas.union, chosen_areas(cells, choice)[1])


@pytest.mark.parametrize('seed', range(4))
def test_greedy_passes_until_nothing_changes(seed):
    # Enough images that one pass does not reach the local optimum.
    cells, labelled = random_cells(seed, images=40, cells=5, pixels=6)
    got = greedy_worst_case([rb.ImageAreas(*c) for c in cells], labelled)
    assert switches_that_lower(cells, [int(c) for c in got.choice]) == []


@pytest.mark.parametrize('seed', range(6))
def test_aacc_is_the_per_image_minimum(seed):
    cells, labelled = random_cells(seed, images=7, cells=4)
    got = greedy_worst_case([rb.ImageAreas(*c) for c in cells], labelled)
    pick, aacc = min_accuracy_by_hand(cells, labelled)
    assert list(got.accuracy_choice) == pick
    assert got.aacc == pytest.approx(aacc)
    for cell in cells:  # no single cell is worse in accuracy
        assert got.aacc <= 100 * cell[0].sum() / labelled.sum() + 1e-9


def test_greedy_is_seeded_and_records_its_choice():
    cells, labelled = random_cells(11, images=30, cells=5)
    areas = [rb.ImageAreas(*c) for c in cells]
    one = greedy_worst_case(areas, labelled, seed=3)
    assert np.array_equal(one.choice,
                          greedy_worst_case(areas, labelled, seed=3).choice)
    keys = [f'a{k}/linf/4/2' for k in range(5)]
    record = worst_record(one, keys)
    assert record['cells'] == keys
    assert sorted(record['choice'], key=int) == [str(i) for i in range(30)]
    assert all(record['choice'][str(i)] == keys[c]
               for i, c in enumerate(one.choice))
    assert greedy_worst_case(areas).aacc is None


def test_model_summary_takes_every_cell_at_the_headline_eps():
    cells, labelled = random_cells(4, images=6, cells=4)
    keys = [
        'pgd/linf/4/2', 'pgd-adaptive/linf/4/2', 'pgd@dot/linf/4/2',
        'pgd/linf/8/2'
    ]
    stored = dict(zip(keys, cells))
    metrics = {k: dict(mIoU=1.) for k in keys}
    metrics['clean'] = dict(mIoU=2.)
    metrics['pgd/linf/8/2'] = dict(mIoU=5.)  # the audit's sweep
    s = attack_model_summary(
        metrics,
        lambda k: rb.ImageAreas(*stored[k]),
        labelled=lambda k: labelled,
        epsilons=[4])
    assert list(s['worst']) == ['4']
    assert s['worst']['4']['cells'] == sorted(keys[:3])
    want = greedy_worst_case(
        [rb.ImageAreas(*stored[k]) for k in sorted(keys[:3])], labelled)
    assert s['worst']['4']['mIoU'] == pytest.approx(want.miou)
    assert s['worst']['4']['aAcc'] == pytest.approx(want.aacc)
    assert s['mean_over_eps']['worst'] == pytest.approx(want.miou)
    assert s['mean_over_eps']['pgd/linf/2'] == 1.  # the headline eps only
    old = attack_model_summary(metrics, lambda k: rb.ImageAreas(*stored[k]))
    assert old['worst']['8']['aAcc'] is None
    assert any('labelled pixels' in n for n in old['notes'])


def test_store_keeps_labelled_pixels_and_reads_old_stores(tmp_path):
    ckpt = tmp_path / 'm.pth'
    ckpt.write_bytes(b'x')
    store = rb.ResultStore(str(tmp_path / 'adversarial.json'), {})
    store.add_model('m', 'c.py', str(ckpt))
    inter, union = np.ones((2, 3), np.int64), np.full((2, 3), 2, np.int64)
    store.put('m', 'new', dict(mIoU=1.), (inter, union, np.array([5, 6])))
    store.put('m', 'old', dict(mIoU=1.), (inter, union))
    assert list(store.labelled('m', 'new')) == [5, 6]
    assert store.labelled('m', 'old') is None
    assert np.array_equal(store.areas('m', 'new').union, union)
