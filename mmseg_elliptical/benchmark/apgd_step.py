"""The benchmark's APGD mode (``attack-apgd``): a short run of the grid's own
APGD-MCE timed per iteration beside PGD's attack step, and its rows over
PGD's (docs/benchmark.md). The step itself lives with the attack it times
(:mod:`mmseg_elliptical.analysis.robustness.attacks.apgd_step`), which
registers it here when the plugin is imported: the benchmark's floor sits
below the analysis."""
from typing import Callable, ContextManager, Dict, List, Optional, Sequence

from torch import Tensor

from .timing import mode_ratios

APGD_MODE = 'attack-apgd'
#: The attack timed: SEA's masked cross-entropy, L-inf, its red-eps stages.
APGD_NAME, APGD_NORM = 'apgd-mce', 'linf'
#: Its radius in 0-255 levels (the stages run at 2, 1.5 and 1 times it).
APGD_EPS = 4.
#: The benchmark's inputs are standard normal: pixels = input x SCALE + MID.
SCALE, MID = 32., 127.5
#: ``maker(runner, x, steps, autocast)`` and ``check(steps)`` of the step,
#: registered by :func:`register_apgd_step`.
APGD_STEP: Dict[str, Callable] = {}


def register_apgd_step(maker: Callable, check: Callable) -> None:
    """Register the APGD step (the attacks room does, on import)."""
    APGD_STEP.update(maker=maker, check=check)


def _registered(what: str) -> Callable:
    if what not in APGD_STEP:
        raise RuntimeError(
            'No APGD step is registered: import mmseg_elliptical (the '
            'plugin) before the benchmark\'s APGD mode.')
    return APGD_STEP[what]


def check_apgd_steps(steps: int) -> None:
    """Raise ValueError unless ``steps`` gives each L-inf stage one
    iteration (0: no APGD mode)."""
    if steps:
        _registered('check')(steps)


def apgd_step(runner: Callable, x: Tensor, steps: int,
              autocast: ContextManager) -> Callable:
    """The registered APGD step on batch ``x`` (see ``ApgdStep``)."""
    return _registered('maker')(runner, x, steps, autocast)


def attacked_logits(out) -> Optional[Tensor]:
    """The last 4-D ``[B, C, h, w]`` tensor of a (nested) model output: a
    segmentor's logits, a backbone's last feature map (its channels taken
    as classes), Mask2Former's last mask prediction."""
    if isinstance(out, Tensor):
        return out if out.dim() == 4 else None
    found = [attacked_logits(o) for o in out]
    found = [t for t in found if t is not None]
    return found[-1] if found else None


def per_iteration(stats: Dict, iterations: int) -> Dict:
    """``time_stats``' fields of a whole APGD run per iteration, with
    ``iterations``."""
    times = ('times_ms', 'round_ms', 'median_ms', 'iqr_ms')
    out = {
        k: [t / iterations
            for t in v] if isinstance(v, list) else v / iterations
        for k, v in stats.items() if k in times
    }
    return dict(
        stats,
        **out,
        images_per_s=stats['images_per_s'] * iterations,
        iterations=iterations)


def apgd_ratios(results: Sequence[Dict]) -> List[Dict]:
    """APGD-MCE iteration / PGD's attack step of each model and size
    (:func:`~.timing.mode_ratios`), with both times."""
    return mode_ratios(
        results, APGD_MODE, lambda r, base: dict(
            iterations=r['iterations'],
            apgd_ms=r['median_ms'],
            pgd_ms=base['median_ms']))
