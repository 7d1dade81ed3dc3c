"""``backbones/twins.py``: EllipticalPCPVT (Twins-PCPVT) against
``oracles.naive_pcpvt_forward``; numerics and compile."""
import pytest
import torch
from helpers import check_compiled, check_finite_forward_backward, images
from oracles import naive_pcpvt_forward

from mmseg_elliptical.models import EllipticalPCPVT

pytestmark = pytest.mark.usefixtures('single_thread')

ARCH = dict(
    embed_dims=[8, 16, 16, 32],
    num_heads=[1, 2, 2, 4],
    depths=[3, 2, 2, 2],
    qkv_bias=True)
FILL = dict(zeros=0., large=1e4, constant=0.5)


def build(**kwargs):
    torch.manual_seed(0)
    model = EllipticalPCPVT(**dict(ARCH, **kwargs))
    model.init_weights()
    return model


@pytest.mark.parametrize('layers', [None, [2], [2, 4, 8]])
def test_elliptical_forward_matches_naive(layers):
    model = build(elliptical_layers=layers).eval()
    if layers is None:  # every block but the first of each stage
        assert model.elliptical_layers == (1, 2, 4, 6, 8)
    flags = [
        b.attn.elliptical for stage in model.layer_stages() for b in stage
    ]
    assert [i for i, f in enumerate(flags)
            if f] == list(model.elliptical_layers)
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        for got, ref in zip(model(x), naive_pcpvt_forward(model, x)):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('case', sorted(FILL))
def test_degenerate_inputs_stay_finite(case):
    check_finite_forward_backward(
        build(),
        torch.full((2, 3, 64, 64), FILL[case]),
        train=True,
        input_grad=True)


def test_torch_compile_matches_eager():
    """Train mode with gradients, and inference (its own scaling path)."""
    torch.manual_seed(0)
    model = EllipticalPCPVT(
        embed_dims=[8, 16, 16, 32],
        num_heads=[1, 2, 2, 4],
        depths=[2, 1, 1, 1])
    check_compiled(model, images(4, 64))
