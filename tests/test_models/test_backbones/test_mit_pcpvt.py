"""``backbones/mit.py`` and ``backbones/twins.py``: the reduced-attention
backbones, EllipticalMixVisionTransformer (SegFormer) and EllipticalPCPVT
(Twins-PCPVT), against ``oracles.naive_mit_forward`` /
``naive_pcpvt_forward`` and mmseg's classes; numerics and compile. Every test
runs for both families."""
import pytest
import torch
from builders import images
from checks import (check_compiled, check_finite_forward_backward,
                    check_matches_naive)
from mmseg.models.backbones import PCPVT, MixVisionTransformer
from oracles import naive_mit_forward, naive_pcpvt_forward

from mmseg_elliptical.models import (EllipticalMixVisionTransformer,
                                     EllipticalPCPVT)

pytestmark = pytest.mark.usefixtures('single_thread')

#: family: (the elliptical class, mmseg's, the oracle, four stages of 3, 2,
#: 2, 2 blocks, and what makes them smaller for torch.compile)
FAMILIES = dict(
    mit=(EllipticalMixVisionTransformer, MixVisionTransformer,
         naive_mit_forward,
         dict(
             embed_dims=8,
             num_heads=[1, 2, 2, 4],
             num_layers=[3, 2, 2, 2],
             sr_ratios=[4, 2, 2, 1]),
         dict(num_layers=[2, 1, 1, 1], sr_ratios=[4, 2, 1, 1])),
    pcpvt=(EllipticalPCPVT, PCPVT, naive_pcpvt_forward,
           dict(
               embed_dims=[8, 16, 16, 32],
               num_heads=[1, 2, 2, 4],
               depths=[3, 2, 2, 2],
               qkv_bias=True), dict(depths=[2, 1, 1, 1])),
)
FILL = dict(zeros=0., large=1e4, constant=0.5)


def build(family, **kwargs):
    cls, _, _, arch, _ = FAMILIES[family]
    torch.manual_seed(0)
    model = cls(**dict(arch, **kwargs))
    model.init_weights()
    return model


@pytest.mark.parametrize('family', sorted(FAMILIES))
@pytest.mark.parametrize('layers', [None, [2], [2, 4, 8]])
def test_elliptical_forward_matches_naive(family, layers):
    _, mmseg_cls, naive, arch, _ = FAMILIES[family]
    model = build(family, elliptical_layers=layers)
    if layers is None:  # every block but the first of each stage
        assert model.elliptical_layers == (1, 2, 4, 6, 8)
    flags = [
        b.attn.elliptical for stage in model.layer_stages() for b in stage
    ]
    assert [i for i, f in enumerate(flags)
            if f] == list(model.elliptical_layers)
    check_matches_naive(
        model,
        naive,
        mmseg_cls(**arch),
        torch.randn(2, 3, 64, 48),
        atol=1e-5,
        rtol=1e-4)


@pytest.mark.parametrize('family', sorted(FAMILIES))
@pytest.mark.parametrize('case', sorted(FILL))
def test_degenerate_inputs_stay_finite(family, case):
    check_finite_forward_backward(
        build(family),
        torch.full((2, 3, 64, 64), FILL[case]),
        train=True,
        input_grad=True)


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_torch_compile_matches_eager(family):
    """Train mode with gradients, and inference (its own scaling path)."""
    check_compiled(build(family, **FAMILIES[family][4]), images(4, 64))
