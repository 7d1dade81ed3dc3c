"""``backbones/beit.py`` and ``backbones/mae.py``: EllipticalBEiT and
EllipticalMAE (BEiT with a qkv bias and an absolute position embedding)
against mmseg's BEiT / MAE and ``oracles.naive_beit_forward``; arguments,
inputs, numerics, memory, compile. Every test runs for both families."""
import pytest
import torch
from builders import BEIT_ARCH, randomise, set_fused, zero_values
from checks import (check_beit_inputs, check_bf16, check_compiled,
                    check_dot_product_equals_mmseg,
                    check_finite_forward_backward, check_interchange,
                    check_matches_naive, check_saves_no_more_scores_than_mmseg)
from mmseg.models.backbones import MAE, BEiT
from oracles import naive_beit_forward

from mmseg_elliptical.models import EllipticalBEiT, EllipticalMAE

pytestmark = pytest.mark.usefixtures('single_thread')

ARCH = BEIT_ARCH
N = 3 * 4 + 1  # tokens: cls and a 4 x 3 patch grid
FILL = dict(zeros=0., large=1e4, constant=0.5, no_change=None)
#: family: (mmseg's class, the elliptical class)
CLASSES = dict(beit=(BEiT, EllipticalBEiT), mae=(MAE, EllipticalMAE))
FAMILIES = sorted(CLASSES)
#: Per family, the third argument set of the dot-product test (MAE has no
#: ``qv_bias``).
THIRD_KWARGS = dict(
    beit=('no_qv_bias', dict(qv_bias=False, patch_norm=True)),
    mae=('patch_norm', dict(patch_norm=True)))


def build(family, **kwargs):
    torch.manual_seed(0)
    model = CLASSES[family][1](**dict(ARCH, **kwargs))
    model.init_weights()
    return model


@pytest.mark.parametrize('family, kwargs', [
    pytest.param(family, kwargs, id=f'{family}-{name}') for family in FAMILIES
    for name, kwargs in (
        ('default', dict()),
        ('final_norm', dict(final_norm=True, out_indices=-1, init_values=1.0)),
        THIRD_KWARGS[family],
    )
])
def test_dot_product_mode_equals_mmseg(family, kwargs):
    check_dot_product_equals_mmseg(
        *CLASSES[family],
        torch.randn(2, 3, 32, 24),
        randomised=True,
        **dict(ARCH, **kwargs))


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('layers', [None, [2, 3]])
def test_elliptical_forward_matches_naive(family, layers):
    model = build(family, elliptical_layers=layers, final_norm=True)
    randomise(model)
    assert model.elliptical_layers == (tuple(layers) if layers else (1, 2, 3))
    check_matches_naive(model, naive_beit_forward,
                        CLASSES[family][0](final_norm=True, **ARCH),
                        torch.randn(2, 3, 32, 24))


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize('family', FAMILIES)
def test_torch_compile_matches_eager(family):
    torch.manual_seed(0)
    model = CLASSES[family][1](final_norm=True, **ARCH)
    randomise(model)
    check_compiled(model, torch.randn(2, 3, 32, 24))


@pytest.mark.parametrize('family', FAMILIES)
def test_checkpoints_load_both_ways_strictly(family):
    torch.manual_seed(0)
    ref_cls, cls = CLASSES[family]
    check_interchange(ref_cls(**ARCH), cls(**ARCH))


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('kwargs, error, match', [
    (dict(elliptical_layers=[0, 1]), ValueError, 'layer 0 has no previous'),
    (dict(elliptical_layers=[4]), ValueError, r'integers in 1\.\.3'),
    (dict(relevance_reduction='max'), ValueError, 'relevance_reduction'),
    (dict(num_layerss=2), TypeError, "did you mean 'num_layers'"),
    (dict(with_cp=True), TypeError, "unexpected keyword argument 'with_cp'"),
])
def test_bad_arguments(family, kwargs, error, match):
    cls = CLASSES[family][1]
    with pytest.raises(error, match=match) as info:
        cls(**dict(ARCH, **kwargs))
    if error is TypeError:
        assert cls.__name__ in str(info.value)


@pytest.mark.parametrize('family', FAMILIES)
def test_bad_inputs(family):
    check_beit_inputs(CLASSES[family][1])


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('case', ['zeros', 'large', 'constant', 'no_change'])
def test_degenerate_inputs_stay_finite(family, case):
    model = build(family)
    x = torch.full((2, 3, 32, 24), 0.5 if case == 'no_change' else FILL[case])
    if case == 'no_change':  # v = 0 in every layer: m has no evidence
        x = torch.randn(2, 3, 32, 24)
        zero_values(model)
    check_finite_forward_backward(model, x, train=False)
    check_finite_forward_backward(model, x, train=True)


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('how', ['autocast', 'bf16_model'])
def test_bf16(family, fused, how):
    """Under CPU bf16 autocast (forward and backward) and as a bf16 model
    (``model.bfloat16()``): finite, and close to fp32."""
    model = build(family)
    randomise(model)
    set_fused(model, fused)
    model.eval()
    check_bf16(model, torch.randn(2, 3, 32, 24), how)


@pytest.mark.parametrize('family', FAMILIES)
def test_training_saves_no_more_scores_than_mmseg(family):
    """In training the bias needs a gradient, so the explicit path (or
    SDPA's math kernel) keeps N x N scores for the backward as mmseg does:
    no more."""
    check_saves_no_more_scores_than_mmseg(*CLASSES[family],
                                          torch.randn(2, 3, 32, 24), N, **ARCH)
