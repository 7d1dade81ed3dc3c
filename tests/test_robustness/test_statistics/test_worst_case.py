"""SEA's worst case over attack cells against loops and a brute force:
the greedy mIoU search ends at a local optimum, no lower than the global
one, its aAcc is the per-image minimum accuracy, and the store keeps the
labelled pixels it needs (older stores still load)."""
import numpy as np
import pytest
from attack_oracles import (chosen_areas, lowest_miou_brute_force,
                            min_accuracy_by_hand, miou_by_hand,
                            switches_that_lower)

from mmseg_elliptical.robustness.grid.areas import ImageAreas
from mmseg_elliptical.robustness.grid.store import ResultStore
from mmseg_elliptical.robustness.statistics import worst
from mmseg_elliptical.robustness.statistics.summary import attack_model_summary
from mmseg_elliptical.robustness.statistics.worst import (greedy_worst_case,
                                                          worst_record)

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
    got = greedy_worst_case([ImageAreas(*c) for c in cells], labelled)
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
    got = greedy_worst_case([ImageAreas(*c) for c in cells], labelled)
    assert switches_that_lower(cells, [int(c) for c in got.choice]) == []


class CountingRng:
    """A numpy generator that counts its ``permutation`` calls (one per
    pass of the greedy search)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.Generator(np.random.PCG64(seed))  # default_rng
        self.passes = 0

    def permutation(self, n: int) -> np.ndarray:
        self.passes += 1
        return self.rng.permutation(n)


def test_greedy_keeps_the_start_cell_on_ties_and_stops_after_one_pass(
        monkeypatch):
    """Two cells of 3 images and 2 classes. Image 0 has fewer correct
    pixels in cell 1 (its start) than in cell 0, but either gives class 0
    an IoU of exactly 1/2 (10 / 20 or 11 / 22): a tie, no lower mIoU.
    The other images are the same in both cells. The search keeps every
    start cell, and stops after the one pass that changed nothing."""
    inter = np.array([[[2, 3], [4, 5], [4, 5]], [[1, 3], [4, 5], [4, 5]]])
    union = np.array([[[4, 6], [8, 9], [8, 9]], [[2, 6], [8, 9], [8, 9]]])
    spies = []

    def spy(seed: int) -> CountingRng:
        spies.append(CountingRng(seed))
        return spies[-1]

    monkeypatch.setattr(worst.np.random, 'default_rng', spy)
    got = greedy_worst_case([ImageAreas(i, u) for i, u in zip(inter, union)],
                            np.array([10, 17, 17]))
    assert got.accuracy_choice.tolist() == [1, 0, 0]  # the first on ties
    assert got.choice.tolist() == [1, 0, 0]
    by_hand = 100 * (10 / 20 + 13 / 24) / 2
    for choice in ([1, 0, 0], [0, 0, 0]):  # the tie, by hand
        assert miou_by_hand(*chosen_areas(list(zip(inter, union)),
                                          choice)) == pytest.approx(by_hand)
    assert got.miou == pytest.approx(by_hand)
    assert [s.passes for s in spies] == [1]


@pytest.mark.parametrize('seed', range(6))
def test_aacc_is_the_per_image_minimum(seed):
    cells, labelled = random_cells(seed, images=7, cells=4)
    got = greedy_worst_case([ImageAreas(*c) for c in cells], labelled)
    pick, aacc = min_accuracy_by_hand(cells, labelled)
    assert list(got.accuracy_choice) == pick
    assert got.aacc == pytest.approx(aacc)
    for cell in cells:  # no single cell is worse in accuracy
        assert got.aacc <= 100 * cell[0].sum() / labelled.sum() + 1e-9


def test_greedy_is_seeded_and_records_its_choice():
    cells, labelled = random_cells(11, images=30, cells=5)
    areas = [ImageAreas(*c) for c in cells]
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
        lambda k: ImageAreas(*stored[k]),
        labelled=lambda k: labelled,
        epsilons=[4])
    assert list(s['worst']) == ['4']
    assert s['worst']['4']['cells'] == sorted(keys[:3])
    want = greedy_worst_case(
        [ImageAreas(*stored[k]) for k in sorted(keys[:3])], labelled)
    assert s['worst']['4']['mIoU'] == pytest.approx(want.miou)
    assert s['worst']['4']['aAcc'] == pytest.approx(want.aacc)
    assert s['mean_over_eps']['worst'] == pytest.approx(want.miou)
    # SEA's own numbers beside ours, under names of their own
    from mmseg_elliptical.robustness.statistics.sea import (
        mean_image_accuracy, sea_worst_case)
    found = [ImageAreas(*stored[k]) for k in sorted(keys[:3])]
    start = int(np.argmin([a.intersect.sum() for a in found]))
    sea = s['worst']['4']
    assert sea['sea_start'] == sorted(keys[:3])[start]  # no MCE-Bal here
    assert sea['mIoU_sea'] == pytest.approx(sea_worst_case(found, start).miou)
    assert sea['aAcc_sea'] == pytest.approx(
        mean_image_accuracy([a.intersect.sum(1) for a in found], labelled))
    assert s['mean_over_eps']['pgd/linf/2'] == 1.  # the headline eps only
    old = attack_model_summary(metrics, lambda k: ImageAreas(*stored[k]))
    assert old['worst']['8']['aAcc'] is None
    assert any('labelled pixels' in n for n in old['notes'])


def test_store_keeps_labelled_pixels_and_reads_old_stores(tmp_path):
    ckpt = tmp_path / 'm.pth'
    ckpt.write_bytes(b'x')
    store = ResultStore(str(tmp_path / 'adversarial.json'), {})
    store.add_model('m', 'c.py', str(ckpt))
    inter, union = np.ones((2, 3), np.int64), np.full((2, 3), 2, np.int64)
    store.put('m', 'new', dict(mIoU=1.), (inter, union, np.array([5, 6])))
    store.put('m', 'old', dict(mIoU=1.), (inter, union))
    assert list(store.labelled('m', 'new')) == [5, 6]
    assert store.labelled('m', 'old') is None
    assert np.array_equal(store.areas('m', 'new').union, union)


@pytest.mark.filterwarnings('ignore::UserWarning')  # SEA's torch.tensor
@pytest.mark.parametrize('seed', range(5))
def test_sea_search_reproduces_seas_released_code(seed):
    import torch
    from sea_oracle import sea_miou_as_released

    from mmseg_elliptical.robustness.statistics.sea import sea_worst_case
    cells, labelled = random_cells(seed, images=12, cells=4, pixels=40)
    inter = torch.tensor(np.stack([c[0] for c in cells]), dtype=torch.float)
    union = torch.tensor(np.stack([c[1] for c in cells]), dtype=torch.float)
    assert (union[0].sum(0) > 0).all()  # every class occurs
    want, chosen = sea_miou_as_released(inter, union)
    got = sea_worst_case([ImageAreas(*c) for c in cells], 0, labelled)
    assert got.miou == pytest.approx(100 * want, abs=1e-9)
    assert list(got.choice) == chosen
    # SEA's search ends at or above our greedy local optimum here
    greedy = greedy_worst_case([ImageAreas(*c) for c in cells], labelled)
    assert got.miou >= greedy.miou - 1e-9
    # MCE-Bal stored second: the search tries it first, then the others
    # in their order, as SEA (choices are indices of the given cells)
    moved = [cells[1], cells[0], cells[2], cells[3]]
    again = sea_worst_case([ImageAreas(*c) for c in moved], 1, labelled)
    assert again.miou == pytest.approx(got.miou)
    assert [[1, 0, 2, 3][c] for c in again.choice] == chosen


def test_seas_union_term_undoes_a_better_lower_numbered_cell():
    """One image, three cells of mIoU 100, 0 and 50 (start: the first).
    Round 1 switches to the second (0), then the third (50 < 100, the state
    before the image) replaces it; round 2 tries the second again (0 < 50),
    then the third ties the state before the image and, with SEA's 1e-8
    in the union, "lowers" it: SEA ends at 50 where the greedy search ends
    at 0."""
    from mmseg_elliptical.robustness.statistics.sea import sea_worst_case
    union = np.array([[2, 2]])
    cells = [
        ImageAreas(np.array([[2, 2]]), union),
        ImageAreas(np.array([[0, 0]]), union),
        ImageAreas(np.array([[2, 0]]), union)
    ]
    sea = sea_worst_case(cells, 0, np.array([4]))
    assert sea.miou == pytest.approx(50.)
    assert list(sea.choice) == [2]
    assert greedy_worst_case(cells).miou == pytest.approx(0.)


def test_seas_aacc_is_the_mean_over_images_of_the_worst_accuracy():
    from mmseg_elliptical.robustness.statistics.sea import mean_image_accuracy
    correct = np.array([[9, 1], [10, 0]])  # [cells, images]
    labelled = np.array([10, 2])
    # per image: min(9, 10) / 10 = 0.9 and min(1, 0) / 2 = 0
    assert mean_image_accuracy(correct, labelled) == pytest.approx(45.)
    pooled = greedy_worst_case(
        [ImageAreas(c[:, None], c[:, None] + 1) for c in correct],
        labelled).aacc
    assert pooled == pytest.approx(100 * 9 / 12)  # 75: pooled differs
    # an image without labelled pixels is left out
    assert mean_image_accuracy(np.array([[9, 0]]),
                               np.array([10, 0])) == pytest.approx(90.)


def test_seas_search_starts_from_mce_bal_and_old_records_read():
    from mmseg_elliptical.robustness.attacks.report import sea_text
    from mmseg_elliptical.robustness.statistics.summary import sea_start
    areas = [
        ImageAreas(np.array([[n]]), np.array([[9]])) for n in (1, 5, 3, 4)
    ]
    keys = [
        'pgd/linf/4/5', 'apgd-mce-bal/linf/4/5',
        'apgd-mce-bal-adaptive/linf/4/5', 'apgd-mce-bal@dot/linf/4/5'
    ]
    assert sea_start(keys, areas) == 2  # the lower of the two MCE-Bal
    assert sea_start(['a/linf/4/1', 'b/linf/4/1'], areas[1:3]) == 1
    assert sea_text(dict(mIoU=1., aAcc=2.)) == ''  # an older store
    assert 'mIoU 3.00 (its search from `k`), aAcc 4.00' in sea_text(
        dict(mIoU_sea=3., aAcc_sea=4., sea_start='k'))
