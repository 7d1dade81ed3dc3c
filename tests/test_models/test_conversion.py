"""``models/conversion.py``: ``to_elliptical`` converts mmseg's modules in
place (parameters, RNG untouched), ``elliptical_version`` looks the class up,
and every module it cannot convert is a ``ConversionError`` that leaves the
module as it was."""
import pytest
import torch
import torch.nn as nn
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmseg.models.backbones import VisionTransformer
from mmseg.models.backbones.mit import EfficientMultiheadAttention
from mmseg.models.backbones.swin import ShiftWindowMSA, WindowMSA
from mmseg.models.backbones.twins import GlobalSubsampledAttention
from mmseg.models.backbones.vit import TransformerEncoderLayer

from mmseg_elliptical.models import (ConversionError, EllipticalAttention,
                                     EllipticalEfficientMultiheadAttention,
                                     EllipticalGlobalSubsampledAttention,
                                     EllipticalTransformerMixin,
                                     EllipticalVisionTransformer,
                                     elliptical_version, to_elliptical)
from mmseg_elliptical.models.conversion import (ELLIPTICAL_VERSIONS,
                                                register_elliptical_version)

C, H, WS = 24, 3, 3


def test_conversion_keeps_parameters_and_rng():
    torch.manual_seed(0)
    mha = EfficientMultiheadAttention(C, H, sr_ratio=2, qkv_bias=True)
    params = dict(mha.named_parameters())
    state = torch.get_rng_state()
    new = to_elliptical(mha, relevance_reduction='median')
    assert new is mha and type(new) is EllipticalEfficientMultiheadAttention
    assert torch.equal(torch.get_rng_state(), state)
    assert dict(new.named_parameters()) == params  # the same tensors
    # sr and norm stay (they were silently dropped by an earlier version).
    assert sum(p.numel()
               for p in new.parameters()) == sum(p.numel()
                                                 for p in params.values())
    assert 'sr.weight' in params and 'norm.weight' in params
    assert new.relevance_reduction == 'median' and new.elliptical
    twins = to_elliptical(GlobalSubsampledAttention(C, H, sr_ratio=2))
    assert type(twins) is EllipticalGlobalSubsampledAttention


def test_conversion_checks_the_exact_type():

    class MyAttention(MultiheadAttention):
        pass

    with pytest.raises(
            TypeError,
            match=r'test_conversion\..*'
            r'MyAttention has no elliptical version \(the type '
            'must match exactly'):
        to_elliptical(MyAttention(C, H, batch_first=True))
    with pytest.raises(
            ConversionError, match='Linear has no elliptical version'):
        to_elliptical(nn.Linear(2, 2))
    with pytest.raises(ConversionError, match='batch_first=True only'):
        to_elliptical(MultiheadAttention(C, H, batch_first=False))


def test_conversion_checks_w_msa_type():

    class MyWindowMSA(WindowMSA):
        pass

    attn = ShiftWindowMSA(C, H, WS)
    attn.w_msa = MyWindowMSA(C, H, (WS, WS))
    with pytest.raises(TypeError, match='supports mmseg.s WindowMSA exactly'):
        to_elliptical(attn)
    assert type(attn) is ShiftWindowMSA  # nothing half-converted


def test_unconvertible_attention_settings() -> None:
    with pytest.raises(ConversionError, match='batch_first=True only'):
        EllipticalAttention(24, 3, batch_first=False)


class Subclassed(MultiheadAttention):
    """A subclass may add behaviour the package does not know."""


def shift_window_msa_with_own_w_msa():
    attn = ShiftWindowMSA(C, H, WS)
    attn.w_msa = type('OwnWindowMSA', (WindowMSA, ), {})(C, H, (WS, WS))
    return attn


UNCONVERTIBLE = {
    'no_version':
    (lambda: nn.Linear(2, 2), {}, 'Linear has no elliptical version'),
    'subclass': (lambda: Subclassed(C, H, batch_first=True), {},
                 r'Subclassed has no elliptical version \(the type must'),
    'already_elliptical': (lambda: EllipticalAttention(C, H), {},
                           'EllipticalAttention is elliptical already'),
    'batch_first': (lambda: MultiheadAttention(C, H, batch_first=False), {},
                    'batch_first=True only'),
    'kdim': (lambda: MultiheadAttention(C, H, batch_first=True, kdim=16), {},
             'needs the packed in_proj_weight'),
    'add_bias_kv':
    (lambda: MultiheadAttention(C, H, batch_first=True, add_bias_kv=True), {},
     'add_bias_kv is not supported'),
    'w_msa': (shift_window_msa_with_own_w_msa, {},
              'OwnWindowMSA; elliptical Swin attention supports'),
    'options': (lambda: WindowMSA(C, H, (WS, WS)), dict(elliptical=False),
                r"EllipticalWindowMSA takes no options, got \{'elliptical'"),
}


@pytest.mark.parametrize('case', sorted(UNCONVERTIBLE))
def test_every_unconvertible_module_is_a_conversion_error(case):
    build, options, match = UNCONVERTIBLE[case]
    module = build()
    before = type(module)
    with pytest.raises(ConversionError, match=match) as info:
        to_elliptical(module, **options)
    assert isinstance(info.value, TypeError)  # as Python's own misuse
    assert type(module) is before  # nothing half-converted


def test_bad_options_leave_the_module_as_it_was():
    mha = MultiheadAttention(C, H, batch_first=True)
    with pytest.raises(ValueError, match='relevance_reduction'):
        to_elliptical(mha, relevance_reduction='max')
    assert type(mha) is MultiheadAttention


def test_elliptical_version():
    assert ELLIPTICAL_VERSIONS
    for source, cls in ELLIPTICAL_VERSIONS.items():
        assert issubclass(cls, source) and cls is not source
        assert elliptical_version(source) is cls
        assert elliptical_version(cls) is cls
    assert elliptical_version(MultiheadAttention) is EllipticalAttention
    assert elliptical_version(nn.Linear) is None
    assert elliptical_version(Subclassed) is None  # exact types only


def test_elliptical_version_of_a_kind():
    """``kind`` keeps the backbones and heads (what the benchmark and the
    analysis read), not the layers and attentions."""
    kind = EllipticalTransformerMixin
    assert elliptical_version(VisionTransformer, kind) is \
        EllipticalVisionTransformer
    assert elliptical_version(EllipticalVisionTransformer, kind) is \
        EllipticalVisionTransformer
    assert elliptical_version(TransformerEncoderLayer) is not None
    assert elliptical_version(TransformerEncoderLayer, kind) is None
    assert elliptical_version(MultiheadAttention, kind) is None
    assert elliptical_version(nn.Linear, kind) is None


def test_register_elliptical_version_checks_the_subclass():
    with pytest.raises(TypeError, match='Mine must subclass Linear'):

        @register_elliptical_version(nn.Linear)
        class Mine(nn.Module):
            pass

    assert nn.Linear not in ELLIPTICAL_VERSIONS
