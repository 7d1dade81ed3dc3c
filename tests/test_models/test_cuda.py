"""Every family on a GPU: fused = explicit in fp32 and under bf16 autocast,
a training step, and no host synchronisation inside the forward.

The CUDA cases skip without a GPU. Their code runs on the CPU too: the
comparisons and the training step on ``'cpu'``, the synchronisation check
on the ``meta`` device (no values at all: any read of one, an ``item()``,
a ``nonzero()``, a Python ``bool`` of a tensor, raises there, as
``torch.cuda.set_sync_debug_mode('error')`` does on a GPU) and as a count
of the ops that read values on the CPU.
"""
from contextlib import contextmanager

import pytest
import torch
from builders import TINY_MODELS, tiny_family
from checks import as_list, check_fused_equals_explicit, outputs_loss
from spies import HostReads

pytestmark = pytest.mark.usefixtures('single_thread')

CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a CUDA GPU')
DEVICES = ['cpu', pytest.param('cuda', marks=CUDA)]
FAMILIES = sorted(TINY_MODELS)
# bf16 keeps ~3 significant digits and the two paths round differently: on
# the CPU the paths' outputs differ by up to 1 % (of their norm), their
# gradients by up to 5.5 % (the Segmenter head's; each path's differ from
# fp32's by 3-5 % there).
BF16_TOL, BF16_GRAD_TOL = 0.03, 0.1


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('family', FAMILIES)
def test_fused_equals_explicit_fp32(family, device):
    model, x = tiny_family(family, device, dropout=False)
    check_fused_equals_explicit(model, x, tol=1e-4)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('family', FAMILIES)
def test_fused_equals_explicit_bf16_autocast(family, device):
    model, x = tiny_family(family, device, dropout=False)
    check_fused_equals_explicit(
        model,
        x,
        autocast=torch.bfloat16,
        tol=BF16_TOL,
        grad_tol=BF16_GRAD_TOL)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('family', FAMILIES)
def test_training_step(family, device):
    """A loss, its backward and an optimiser step: a finite loss, a finite
    gradient for every trainable parameter, weights that moved and a
    finite second forward."""
    model, x = tiny_family(family, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = outputs_loss(as_list(model(x)))
    assert torch.isfinite(loss)
    loss.backward()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    missing = [n for n, p in params.items() if p.grad is None]
    assert not missing, missing
    bad = [n for n, p in params.items() if not torch.isfinite(p.grad).all()]
    assert not bad, bad
    before = {n: p.detach().clone() for n, p in params.items()}
    optimizer.step()
    assert any(not torch.equal(before[n], p) for n, p in params.items())
    assert torch.isfinite(outputs_loss(as_list(model(x))))


@contextmanager
def no_host_sync(device: str):
    """On CUDA, any synchronisation inside raises; on ``meta`` any read of a
    value does anyway."""
    if device != 'cuda':
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def forwards(model, x) -> None:
    """An inference forward and a training forward (with gradients)."""
    model.eval()
    with torch.no_grad():
        as_list(model(x))
    model.train()
    as_list(model(x))


@pytest.mark.parametrize('device', ['meta', pytest.param('cuda', marks=CUDA)])
@pytest.mark.parametrize('family', FAMILIES)
def test_forward_does_not_synchronise(family, device):
    """With the default ``check_finite`` ('cpu'), nothing in the forward
    waits for the device."""
    model, x = tiny_family(family, device)
    assert model.check_finite == 'cpu'
    with no_host_sync(device):
        forwards(model, x)


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('check_finite', ['cpu', 'never'])
def test_forward_reads_values_only_for_the_finite_check(family, check_finite):
    """On the CPU the forward reads one value back, the non-finite check's
    count (none with ``check_finite='never'``): no other op of the
    forward would synchronise on a GPU."""
    model, x = tiny_family(family, check_finite=check_finite)
    with HostReads() as reads:
        forwards(model, x)
    expected = 2 if check_finite == 'cpu' else 0  # one per forward
    assert len(reads.ops) == expected, reads.ops
