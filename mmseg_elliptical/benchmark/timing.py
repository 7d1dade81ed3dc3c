"""Interleaved timing with ``torch.utils.benchmark`` and paired per-round
ratios, so a drift of the machine's speed cancels (docs/benchmark.md)."""
import random
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from torch.utils.benchmark import Measurement, Timer
from torch.utils.benchmark.utils.timer import timer as synced_timer

from ..utils.choices import CLOCKS  # noqa: F401 (--clock)


def make_timer(step: Callable[[], None],
               label: str = '',
               sub_label: str = '',
               description: str = '',
               num_threads: int = 1,
               clock: str = 'wall') -> Timer:
    """A ``torch.utils.benchmark.Timer`` of ``step()``.

    Args:
        step (callable): The step, called without arguments.
        label, sub_label, description (str): Timer labels.
        num_threads (int): torch threads while timing.
        clock (str): ``'wall'`` (synchronises the accelerator) or
            ``'process'`` (process CPU time; CPU only).
    """
    if clock not in CLOCKS:
        raise ValueError(f'clock={clock!r} must be one of {CLOCKS}.')
    return Timer(
        stmt='step()',
        globals={'step': step},
        label=label,
        sub_label=sub_label,
        description=description,
        num_threads=num_threads,
        timer=synced_timer if clock == 'wall' else time.process_time)


def run_interleaved(
    timers: Dict[str, Timer],
    rounds: int,
    min_run_time: float = 0.,
    seed: int = 0,
    on_step: Optional[Callable[[],
                               None]] = None) -> Dict[str, List[Measurement]]:
    """Time every timer once per round, in a new random order each round.

    Args:
        timers (dict[str, Timer]): Timers by name.
        rounds (int): Number of rounds (>= 1).
        min_run_time (float): ``blocked_autorange``'s minimum time per timer
            and round, in seconds (0: one run).
        seed (int): Seed of the orders.
        on_step (callable, optional): Called after each timer's round.

    Returns:
        dict[str, list[Measurement]]: One measurement per round and timer.
    """
    if rounds < 1:
        raise ValueError(f'rounds={rounds} must be >= 1.')
    rng = random.Random(seed)
    names = list(timers)
    out: Dict[str, List[Measurement]] = {name: [] for name in names}
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            out[name].append(
                timers[name].blocked_autorange(min_run_time=min_run_time))
            if on_step is not None:
                on_step()
    return out


def time_stats(rounds: Sequence[Measurement], batch_size: int = 1) -> Dict:
    """Median, IQR (of the merged rounds) and throughput of one model.

    Returns:
        dict: ``times_ms`` (per run), ``round_ms`` (median per round),
        ``median_ms``, ``iqr_ms`` and ``images_per_s``.
    """
    merged, = Measurement.merge(rounds)
    return dict(
        times_ms=[t * 1e3 for t in merged.times],
        round_ms=[m.median * 1e3 for m in rounds],
        median_ms=merged.median * 1e3,
        iqr_ms=merged.iqr * 1e3,
        images_per_s=batch_size / merged.median)


@dataclass
class RatioStats:
    """Summary of the per-round ratios of two models.

    Attributes:
        median, q1, q3 (float): Median and quartiles of the ratios.
        rounds (int): Number of rounds.
    """
    median: float
    q1: float
    q3: float
    rounds: int

    def row(self) -> Dict[str, float]:
        """The fields of a ratio row: ``time``, ``time_q1``, ``time_q3``,
        ``rounds``."""
        return dict(
            time=self.median,
            time_q1=self.q1,
            time_q3=self.q3,
            rounds=self.rounds)


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> RatioStats:
    """Median and quartiles of ``a[i] / b[i]`` (subject over baseline, both
    timed in round ``i``)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not a.size:
        raise ValueError('paired_ratio needs two equally long, non-empty '
                         f'sequences of round times, got {a.shape} and '
                         f'{b.shape}.')
    if (b <= 0).any():
        raise ValueError('paired_ratio: baseline times must be > 0.')
    q1, median, q3 = np.percentile(a / b, [25, 50, 75])
    return RatioStats(float(median), float(q1), float(q3), int(a.size))


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """``a / b``, or None when either is missing or ``b`` is not positive."""
    return None if a is None or b is None or b <= 0 else a / b


def mode_ratios(
        results: Sequence[Dict],
        mode: str,
        extra: Optional[Callable[[Dict, Dict], Dict]] = None) -> List[Dict]:
    """Each model and size's ``mode`` rows over its plain attack step
    (``attack``), both timed in the same rounds: time paired per round,
    peak memory one ratio; ``extra(row, base)`` adds fields after the
    size."""
    table = {(r['model'], r['size'], r['mode']): r for r in results}
    rows = []
    for r in (r for r in results if r['mode'] == mode):
        base = table[(r['model'], r['size'], 'attack')]
        rows.append(
            dict(
                family=r['family'],
                model=r['model'],
                role=r['role'],
                size=r['size'],
                **(extra(r, base) if extra else {}),
                **paired_ratio(r['round_ms'], base['round_ms']).row(),
                memory=ratio(r['peak_mem_mb'], base['peak_mem_mb'])))
    return rows
