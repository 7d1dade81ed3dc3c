"""``benchmark/timing.py``: the benchmark's statistics on known numbers and
its interleaved rounds."""
import pytest
from torch.utils.benchmark import Measurement
from torch.utils.benchmark.utils.common import TaskSpec

from mmseg_elliptical.benchmark.timing import (RatioStats, make_timer,
                                               paired_ratio, run_interleaved,
                                               time_stats)

pytestmark = pytest.mark.usefixtures('single_thread')


def measurement(times, number=1):
    return Measurement(number, list(times), TaskSpec('step()', 'pass'))


def test_paired_ratio_known_numbers():
    # Per-round ratios 2, 2, 3, 1: median 2, quartiles 1.75 and 2.25.
    stats = paired_ratio([2., 4., 6., 3.], [1., 2., 2., 3.])
    assert stats == RatioStats(2., 1.75, 2.25, 4)
    # Pairing matters: the ratio of the medians would be 3.5 / 2 = 1.75.
    with pytest.raises(ValueError, match='equally long'):
        paired_ratio([1., 2.], [1.])
    with pytest.raises(ValueError, match='> 0'):
        paired_ratio([1.], [0.])


def test_time_stats_known_numbers():
    # Three rounds; the last timed two runs in one block of 2 steps each.
    rounds = [
        measurement([1e-3]),
        measurement([3e-3]),
        measurement([4e-3, 20e-3], number=2)
    ]
    s = time_stats(rounds, batch_size=4)
    assert s['times_ms'] == pytest.approx([1, 3, 2, 10])
    assert s['round_ms'] == pytest.approx([1, 3, 6])
    assert s['median_ms'] == pytest.approx(2.5)  # the mean would be 4
    assert s['iqr_ms'] == pytest.approx(4.75 - 1.75)
    assert s['images_per_s'] == pytest.approx(4 / 2.5e-3)


def test_run_interleaved_shuffles_rounds():
    log = []
    timers = {
        n: make_timer(lambda n=n: log.append(n), description=n)
        for n in 'abc'
    }
    out = run_interleaved(
        timers, rounds=6, seed=1, on_step=lambda: log.append('|'))
    assert {n: len(m) for n, m in out.items()} == {'a': 6, 'b': 6, 'c': 6}
    blocks = ''.join(log).split('|')[:-1]  # the calls of each timer's turn
    assert all(len(set(b)) == 1 for b in blocks)
    orders = [[b[0] for b in blocks[i:i + 3]] for i in range(0, 18, 3)]
    assert len(blocks) == 18
    assert all(sorted(o) == ['a', 'b', 'c'] for o in orders)
    assert len({tuple(o) for o in orders}) > 1  # not the same every round
