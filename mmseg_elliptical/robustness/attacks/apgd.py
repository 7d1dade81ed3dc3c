"""APGD (Croce & Hein, ICML 2020) as SEA uses it for segmentation (Croce,
Singh and Hein, ECCV 2024; ``semseg/attacker.py`` of
nmndeep/Robust-Segmentation), in the 0-255 space of the other attacks.

Evaluation (SEA's ``apgd_largereps``): L-inf runs the "red-eps" stages at
2, 1.5 and 1 eps (``int(0.3 n)``, ``int(0.3 n)``, the rest), each from the
previous stage's kept points; L2 one stage at eps. Each stage: a first
step of 2 x its radius, momentum 0.75, checkpoints that halve the step and
restart from the point of highest cross-entropy (``apgd-dlr`` tracks its
own loss); the point kept per image is the one of lowest pixel accuracy
(ties: the later), and an image at 0 accuracy stops (SEA's early stop).
Training (``train=True``, SEA's ``apgd_train``): one stage at eps, the
attack's own loss tracked, no early stop, the point of highest loss.
docs/evidence.md lists where both differ from SEA.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ...errors import AnalysisError
from ...models.attention import adaptive_relevance
from . import cells as cells
from .cells import stages
from .losses import BALANCED, LOSSES, cross_entropy, pixel_accuracy

# The names of utils/attack_cells.py (the tools' checks) kept here too.
APGD_ATTACKS, SEA_ATTACKS = cells.APGD_ATTACKS, cells.SEA_ATTACKS
#: The attacks whose step-size control tracks their own loss in evaluation
#: (the others track the plain cross-entropy, as SEA's).
SELF_TRACKED = ('apgd-dlr', )
MOMENTUM = 0.75
#: A checkpoint halves the step when at most this fraction of the steps
#: since the last one raised the tracked loss.
RHO = 0.75


def project(norm: str, x: Tensor, x0: Tensor, radius: float) -> Tensor:
    """``x`` projected onto the ball around ``x0``, then onto [0, 255]."""
    if norm == 'linf':
        x = torch.min(torch.max(x, x0 - radius), x0 + radius)
    else:
        d = x - x0
        n = d.norm()
        x = x0 + d / (n + 1e-12) * torch.clamp(n, max=radius)
    return x.clamp(0, 255)


@dataclass
class State:
    """One image's APGD state within a stage.

    Attributes:
        x (Tensor): The current point; ``x_old`` the previous one.
        grad (Tensor): The attack loss's gradient at ``x``.
        loss (float): The tracked loss at the start.
        acc (float): The lowest pixel accuracy seen, that of ``kept``.
        step (float): The step size (pixels).
        record (dict): What :func:`run_stage` returns for the image.
        best (tuple): Point, gradient and tracked loss of the highest loss.
        last_best (float): The highest loss at the last checkpoint.
        reduced (bool): Whether the last checkpoint halved the step.
        history (list[float]): The tracked loss of each iteration (0 until
            it runs, as SEA's zero-initialised tensor).
    """
    x: Tensor
    grad: Tensor
    loss: float
    acc: float
    step: float
    record: Dict
    x_old: Tensor = None
    best: Tuple = None
    last_best: float = 0.
    reduced: bool = True
    kept: Tensor = None
    history: List[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.x_old = self.kept = self.x
        self.best = (self.x, self.grad, self.loss)
        self.last_best = self.loss

    def move(self, norm: str, x0: Tensor, radius: float, a: float) -> None:
        """APGD's step with momentum ``1 - a``, projected."""
        x, last = self.x, self.x - self.x_old
        if norm == 'linf':
            z = project(norm, x + self.step * self.grad.sign(), x0, radius)
        else:
            z = x + self.step * self.grad / (self.grad.norm() + 1e-12)
            z = project(norm, z, x0, radius)
        self.x_old = x
        self.x = project(norm, x + (z - x) * a + last * (1 - a), x0, radius)

    def update(self, i: int, grad: Optional[Tensor], loss: float,
               acc: float) -> None:
        """Record iteration ``i``'s point: the kept (lowest accuracy) and
        best (highest tracked loss) points."""
        if grad is not None:
            self.grad = grad
        if acc <= self.acc:
            self.kept, self.acc = self.x, acc
            self.record.update(kept=i, accuracy=acc)
        self.history[i] = loss
        if loss > self.best[2]:
            self.best = (self.x, self.grad, loss)
            self.record['best'] = i

    def checkpoint(self, i: int, k: int) -> None:
        """Halve the step and restart from the best point when the tracked
        loss rose in at most ``RHO`` of the last ``k`` iterations, or when
        the best did not improve since an unreduced checkpoint."""
        # At the first checkpoint ``i - c - 1`` reaches -1: the last entry,
        # still 0, as in SEA's and AutoAttack's code.
        ups = sum(self.history[i - c] > self.history[i - c - 1]
                  for c in range(k))
        reduce = ups <= k * RHO or (not self.reduced
                                    and self.last_best >= self.best[2])
        self.reduced, self.last_best = reduce, self.best[2]
        if reduce:
            self.step /= 2
            self.x, self.grad = self.best[0], self.best[1]
            self.record['halvings'].append(i)


def evaluate(forward: Callable, loss: Callable, track: Callable,
             xs: List[Tensor], labels: List[Tensor], ignore_index: int,
             weights: Optional[Tensor], grad: bool) -> tuple:
    """The attack loss's input gradients (or None), the tracked losses
    (``track``'s) and the pixel accuracies at ``xs``."""
    xs = [x.detach().requires_grad_(grad) for x in xs]
    with torch.set_grad_enabled(grad):
        logits = forward(xs)
        grads = [None] * len(xs)
        if grad:
            total = sum(
                loss(lg, lb, ignore_index, weights)
                for lg, lb in zip(logits, labels))
            grads = [g.detach() for g in torch.autograd.grad(total, xs)]
    with torch.no_grad():
        tracked = [
            track(lg, lb, ignore_index, weights).item()
            for lg, lb in zip(logits, labels)
        ]
        accs = [
            pixel_accuracy(lg, lb, ignore_index)
            for lg, lb in zip(logits, labels)
        ]
    return grads, tracked, accs


def run_stage(run: Callable,
              norm: str,
              x0: List[Tensor],
              starts: List[Tensor],
              radius: float,
              steps: int,
              train: bool = False) -> Tuple[List[Tensor], List[Dict]]:
    """One APGD run of ``steps`` iterations in the ball of ``radius``.

    Args:
        train (bool): No early stop, and the points of highest tracked loss
            returned (SEA's ``apgd_train``'s ``x_best``), not the kept ones.

    Returns:
        tuple: The kept (``train``: best) points and each image's record:
        ``radius``, ``steps``, ``halvings`` (the iterations whose checkpoint
        halved the step), ``kept`` (the kept point's iteration; -1: the
        start) and its ``accuracy``, ``best`` (the best point's iteration).
    """
    grads, losses, accs = run(starts, True)
    states = [
        State(
            x,
            g,
            lo,
            acc,
            2 * radius,
            dict(
                radius=radius,
                steps=steps,
                halvings=[],
                kept=-1,
                accuracy=acc,
                best=-1),
            history=[0.] * steps)
        for x, g, lo, acc in zip(starts, grads, losses, accs)
    ]
    k = max(int(0.22 * steps), 1)
    k_min, k_decrease = max(int(0.06 * steps), 1), max(int(0.03 * steps), 1)
    live, counter = list(range(len(x0))), 0
    for i in range(steps):
        for j in live:
            states[j].move(norm, x0[j], radius, MOMENTUM if i else 1.)
        grads, losses, accs = run([s.x for s in states], i < steps - 1)
        counter += 1
        for j in live:
            states[j].update(i, grads[j], losses[j], accs[j])
            if counter == k:
                states[j].checkpoint(i, k)
        if counter == k:
            counter, k = 0, max(k - k_decrease, k_min)
        if not train:
            live = [j for j in live if states[j].acc > 0]
        if not live:
            break
    points = [s.best[0] if train else s.kept for s in states]
    return points, [s.record for s in states]


def apgd(forward: Callable[[List[Tensor]], List[Tensor]],
         x0: Sequence[Tensor],
         labels: Sequence[Tensor],
         start: Callable[[int, float], Tensor],
         name: str,
         norm: str,
         eps: float,
         steps: int,
         ignore_index: int = 255,
         weights: Optional[Sequence[float]] = None,
         train: bool = False) -> Tuple[List, List]:
    """APGD with one of SEA's losses on a batch of images: SEA's evaluation
    (``apgd_largereps``), or its training attack (``apgd_train``).

    Args:
        forward (callable): Images to ``[C, H, W]`` logits at their labels'
            size.
        x0 (Sequence[Tensor]): The ``[3, H, W]`` clean images (0-255).
        labels (Sequence[Tensor]): ``[H, W]`` labels of the logits.
        start (callable): ``(image index, radius)`` to the random start.
        name (str): One of :data:`APGD_ATTACKS`.
        norm (str): ``'linf'`` or ``'l2'``.
        eps (float): The radius, in pixel units (0-255).
        steps (int): Iterations (one forward and backward each).
        ignore_index (int): Label of pixels without a class.
        weights (Sequence[float], optional): Class weights (used by
            ``apgd-mce-bal`` only).
        train (bool): SEA's training attack: one stage at eps from
            ``start(j, eps)``, the attack's loss tracked (not the plain
            cross-entropy), no early stop, the points of highest loss
            returned. Defaults to False.

    Returns:
        tuple: The adversarial images and, per image, each stage's record
        (:func:`run_stage`).
    """
    if name in BALANCED and weights is None:
        raise AnalysisError(f'{name} needs the class weights of the training '
                            'set: give the attack its class_weights.')
    w = torch.tensor(weights) if name in BALANCED else None
    x0 = [x.detach() for x in x0]

    # The margin loss tracks itself: a saturated softmax leaves the
    # cross-entropy, and with it the step-size control, blind too.
    track = LOSSES[name] if train or name in SELF_TRACKED else cross_entropy

    def run(xs, grad):
        return evaluate(forward, LOSSES[name], track, xs, labels, ignore_index,
                        w, grad)

    plan = [(eps, steps)] if train else stages(norm, eps, steps)
    xs = [start(j, plan[0][0]) for j in range(len(x0))]
    trace: List[List[Dict]] = [[] for _ in x0]
    for radius, n in plan:
        xs = [project(norm, x, o, radius) for x, o in zip(xs, x0)]
        xs, records = run_stage(run, norm, x0, xs, radius, n, train)
        for t, r in zip(trace, records):
            t.append(r)
    return [x.detach() for x in xs], trace


def apgd_images(attack, model, forward: Callable, x0: Sequence[Tensor],
                labels: Sequence[Tensor], ignore_index: int, start: Callable,
                keys: Sequence[str], unit: float) -> List[Tensor]:
    """:func:`apgd` of an :class:`~.attacks.Attack` cell, as
    :func:`~.attacks.perturb` runs it (``train``: the cell's).

    Args:
        model (nn.Module): What ``forward`` runs (adaptive: its attentions).
        start (callable): ``(image, key, eps)`` to the image's random start
            in the ball of radius ``eps`` (in eps's unit).
        keys (Sequence[str]): What seeds each image's random start.
        unit (float): Pixels per unit of eps.
    """
    with adaptive_relevance(model, attack.adaptive):
        return apgd(forward, x0, labels,
                    lambda j, r: start(x0[j], keys[j], r / unit), attack.name,
                    attack.norm, attack.eps * unit, attack.steps, ignore_index,
                    attack.class_weights, attack.train)[0]
