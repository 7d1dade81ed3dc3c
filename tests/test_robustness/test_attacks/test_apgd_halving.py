"""APGD's step-halving fraction (``RHO`` = 0.75, SEA's and Croce & Hein's)
on stages long enough for it to decide checkpoints (issue 45, item 7),
against the independent re-implementation of ``apgd_oracle``, on a small
float64 network (no demo model: the test runs in a second)."""
from typing import List, Tuple

import torch
from apgd_oracle import apgd_by_hand, records_equal
from torch import Tensor

from mmseg_elliptical.robustness.attacks import apgd

#: 50 L-inf iterations: stages of 15, 15 and 20 iterations, each with 4
#: or more checkpoints (at 0.22, then one fewer iteration apart).
STEPS, EPS = 50, 8.


def toy_problem() -> Tuple:
    """A fixed 2-layer float64 network of 4 classes on two 8 x 8 images,
    labelled with its own clean predictions."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Tanh(),
        torch.nn.Conv2d(8, 4, 3, padding=1)).double()
    for p in net.parameters():
        p.requires_grad_(False)

    def f(x: Tensor) -> Tensor:
        return net((x / 255. - 0.5)[None].double())[0]

    g = torch.Generator().manual_seed(1)
    x0 = [
        torch.rand(3, 8, 8, generator=g, dtype=torch.float64) * 255
        for _ in range(2)
    ]
    return f, x0, [f(x).argmax(0) for x in x0]


def package_run(f, x0: List[Tensor], labels: List[Tensor]) -> List:
    """The package's per-image stage records (clean start)."""
    return apgd.apgd(lambda xs: [f(x) for x in xs], x0, labels,
                     lambda j, r: x0[j].clone(), 'apgd-mce', 'linf', EPS,
                     STEPS)[1]


def test_halving_fraction_decides_as_the_hand_written_one(monkeypatch):
    """Each stage's halvings, kept iteration and accuracy equal the
    oracle's (whose fraction, 0.75, is written out there); the stages have
    4 or more checkpoints; and the fraction is not idle here: 0.7 (a
    checkpoint at 3 rises out of 4 halves at 0.75 only) and 1 change the
    records."""
    f, x0, labels = toy_problem()
    got = package_run(f, x0, labels)
    for j, records in enumerate(got):
        _, want = apgd_by_hand(f, x0[j], labels[j], 'apgd-mce', 'linf', EPS,
                               STEPS, x0[j].clone())
        assert records_equal(records, want), (records, want)
        assert [r['steps'] for r in records] == [15, 15, 20]
        assert all(len(r['halvings']) >= 4 for r in records)
    for rho in (0.7, 1.):
        monkeypatch.setattr(apgd, 'RHO', rho)
        other = package_run(f, x0, labels)
        assert any(not records_equal(a, b) for a, b in zip(got, other)), rho
