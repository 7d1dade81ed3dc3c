"""What a long command will do and how long it will take: steps with an
estimate each, announced at the start, then a line after each step with the
time it took and the time left (``make report``: its trainings, then
``compare_models.py``'s sections).

The estimates are this machine's measurements (2 cores, idle; docs/demo.md,
"make report's time"); the time left scales the remaining estimates by how
the finished steps compared with theirs, so a loaded or faster machine
corrects itself after the first step.
"""
import time
from typing import Callable, List, Optional, Sequence, Tuple

#: One demo training (3,000 iterations, pinned kernels, one thread), s.
TRAIN_SECONDS = 210.
#: compare_models.py's sections on the demo (128 scenes, 32 attacked), s.
SECTION_SECONDS = (
    ('accuracy and corruption robustness', 70.),
    ('attacks and the gradient-masking audit', 330.),
    ('collapse, attention maps and speed', 20.),
)


def minutes(seconds: float) -> str:
    """``'12 min'`` (``'< 1 min'`` below half a minute)."""
    return '< 1 min' if seconds < 30 else f'{seconds / 60:.0f} min'


class Countdown:
    """Announce steps with their estimates; after each, say what is left.

    Args:
        steps (Sequence[tuple[str, float]]): ``(step, estimated seconds)``
            in the order they run.
        log (callable): Where the lines go (default: ``print``).
    """

    def __init__(self,
                 steps: Sequence[Tuple[str, float]],
                 log: Callable[[str], None] = print) -> None:
        self.steps: List[Tuple[str, float]] = list(steps)
        self.log = log
        self.finished: List[Tuple[float, float]] = []  # (estimate, took)
        self.started: Optional[float] = None

    @property
    def total(self) -> float:
        return sum(s for _, s in self.steps)

    def announce(self, what: str) -> None:
        """Print the plan: each step and the whole, and start the clock."""
        self.log(f'{what}: {len(self.steps)} steps, about '
                 f'{minutes(self.total)} in all (estimated from this '
                 'machine\'s measurements, idle; docs/demo.md):')
        for step, seconds in self.steps:
            self.log(f'  - {step}: about {minutes(seconds)}')
        self.started = time.perf_counter()

    def left(self) -> float:
        """Seconds left: the estimates of the steps not done, scaled by
        how the done ones went (between a quarter and four times)."""
        done = len(self.finished)
        rest = sum(s for _, s in self.steps[done:])
        estimated = sum(e for e, _ in self.finished)
        took = sum(t for _, t in self.finished)
        scale = min(4., max(.25, took / estimated)) if estimated else 1.
        return rest * scale

    def done(self, seconds: Optional[float] = None) -> None:
        """Mark the next step done (``seconds`` it took; default: since the
        previous step) and print the time left."""
        now = time.perf_counter()
        if seconds is None:
            seconds = now - (self.started or now)
        self.started = now
        step, estimate = self.steps[len(self.finished)]
        self.finished.append((estimate, seconds))
        left = len(self.steps) - len(self.finished)
        tail = (f'; about {minutes(self.left())} left ({left} steps)'
                if left else '; all done')
        self.log(f'{step}: done in {minutes(seconds)}{tail}')
