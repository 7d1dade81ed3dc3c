"""``models/checks.py``: argument checks at build time and input checks.

Every new argument of the backbones, the head and the attentions is checked
when the module is built, and the error names the argument, the value and
what is allowed; a misspelt keyword names the plugin class and the closest
valid name; bad input at run time names the problem and the fix; the
non-finite check reads the values only where that costs no host
synchronisation (``check_finite``).
"""
import numpy as np
import pytest
import torch
from builders import VIT_ARCH
from mmseg.registry import MODELS

from mmseg_elliptical.models import (EllipticalMaskTransformerHead,
                                     EllipticalMixVisionTransformer,
                                     EllipticalPCPVT,
                                     EllipticalVisionTransformer)
from mmseg_elliptical.models.checks import (CHECK_FINITE, check_images,
                                            check_kwargs, init_keywords,
                                            looks_at_values)

pytestmark = pytest.mark.usefixtures('single_thread')

BACKBONE = VIT_ARCH
HEAD = dict(
    in_channels=24,
    channels=24,
    num_classes=5,
    num_layers=4,
    num_heads=3,
    embed_dims=24,
    dropout_ratio=0.0)
MODULES = {
    'backbone': (EllipticalVisionTransformer, BACKBONE),
    'head': (EllipticalMaskTransformerHead, HEAD),
}
STAGED = {
    'mit':
    (EllipticalMixVisionTransformer,
     dict(embed_dims=8, num_heads=[1, 2, 2, 4], num_layers=[3, 2, 2, 2])),
    'pcpvt': (EllipticalPCPVT,
              dict(
                  embed_dims=[8, 16, 16, 32],
                  num_heads=[1, 2, 2, 4],
                  depths=[3, 2, 2, 2])),
}


def build(which: str, **kwargs):
    cls, arch = MODULES[which]
    return cls(**arch, **kwargs)


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize('layers, allowed', [
    (1.0, 'must be a list of distinct integers in 1..3'),
    (2, 'must be a list of distinct integers in 1..3'),
    ('12', 'must be a list of distinct integers in 1..3'),
    ({
        1: True
    }, 'must be a list of distinct integers in 1..3'),
    ([1.0], "not of ['float']"),
    ([True], "not of ['bool']"),
    ([np.bool_(True)], 'must be a list'),
    ([None], "not of ['NoneType']"),
    ([0, 1], 'layer 0 has no previous'),
    ([1, 1], 'duplicates'),
    ([4], 'valid are distinct integers in 1..3'),
    ([-1], 'valid are distinct integers in 1..3'),
])
def test_bad_elliptical_layers(which: str, layers, allowed: str) -> None:
    cls = MODULES[which][0]
    with pytest.raises(ValueError) as info:
        build(which, elliptical_layers=layers)
    msg = str(info.value)
    assert cls.__name__ in msg and 'elliptical_layers=' in msg
    assert allowed in msg
    # The offending value is in the message (as given, or as the list read).
    assert repr(layers) in msg or repr(list(layers)) in msg


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize(
    'layers, expected',
    [
        ([3, 1], (1, 3)),
        ((2, ), (2, )),
        (np.array([2, 1]), (1, 2)),  # numpy integers are integers
        (range(3, 1, -1), (2, 3)),  # any iterable of ints
        ([], ()),
    ])
def test_good_elliptical_layers(which: str, layers, expected) -> None:
    module = build(which, elliptical_layers=layers)
    assert module.elliptical_layers == expected
    assert all(type(i) is int for i in module.elliptical_layers)
    flags = [layer.attn.elliptical for layer in module.layers]
    assert flags == [i in expected for i in range(4)]


def test_generator_is_read_once() -> None:
    module = build('backbone', elliptical_layers=(i for i in (3, 2)))
    assert module.elliptical_layers == (2, 3)


def test_single_layer_allows_only_empty() -> None:
    arch = dict(BACKBONE, num_layers=1)
    assert EllipticalVisionTransformer(**arch).elliptical_layers == ()
    with pytest.raises(ValueError, match='a single layer has no previous'):
        EllipticalVisionTransformer(elliptical_layers=[0], **arch)


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize('value', ['sum', 'MEAN', None, ['mean'], 1])
def test_bad_relevance_reduction(which: str, value) -> None:
    with pytest.raises(ValueError) as info:
        build(which, relevance_reduction=value)
    msg = str(info.value)
    assert MODULES[which][0].__name__ in msg
    assert f'relevance_reduction={value!r}' in msg
    assert "('mean', 'median')" in msg


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize(
    'value',
    [0, 0.0, -1e-6,
     float('nan'),
     float('inf'), True, '1e-6', None, [1e-6]])
def test_bad_relevance_eps(which: str, value) -> None:
    with pytest.raises(ValueError) as info:
        build(which, relevance_eps=value)
    msg = str(info.value)
    assert MODULES[which][0].__name__ in msg
    assert f'relevance_eps={value!r}' in msg
    assert 'finite number > 0' in msg


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize('value', [1e-3, 1, np.float64(1e-8), np.float32(0.5)])
def test_good_relevance_eps(which: str, value) -> None:
    module = build(which, relevance_eps=value, relevance_reduction='median')
    attn = module.layers[1].attn
    assert attn.relevance_eps == value \
        and attn.relevance_reduction == 'median'


def test_error_survives_the_registry() -> None:
    cfg = dict(
        type='EllipticalVisionTransformer', relevance_eps=-1, **BACKBONE)
    with pytest.raises(ValueError, match=r'relevance_eps=-1 must be a finite'):
        MODELS.build(cfg)


@pytest.mark.parametrize('shape, dtype', [((3, 32, 32), torch.float32),
                                          ((1, 3, 32, 32), torch.uint8)])
def test_backbone_rejects_bad_images(shape, dtype) -> None:
    model = build('backbone')
    with pytest.raises(
            ValueError,
            match=r'expects a float batch of images '
            r'\[B, C, H, W\], got shape'):
        model(torch.zeros(shape, dtype=dtype))


@pytest.mark.parametrize('which', sorted(STAGED))
def test_staged_elliptical_layers(which: str) -> None:
    cls, arch = STAGED[which]
    assert cls(**arch).elliptical_layers == (1, 2, 4, 6, 8)
    assert cls(elliptical_layers=[8, 2], **arch).elliptical_layers == (2, 8)
    with pytest.raises(ValueError) as info:
        cls(elliptical_layers=[1, 3], **arch)
    assert str(info.value) == (
        f'{cls.__name__}: elliptical_layers=[1, 3] contains [3]: the first '
        'layer of each stage ([0, 3, 5, 7]) has no previous layer\'s values '
        'in its stage and stays dot-product; valid are distinct integers '
        'among [1, 2, 4, 6, 8].')
    with pytest.raises(ValueError, match=r'contains \[9\]: valid are'):
        cls(elliptical_layers=[9], **arch)


@pytest.mark.parametrize('cls, arch, wrong, right', [
    (EllipticalVisionTransformer, BACKBONE, 'num_layer', 'num_layers'),
    (EllipticalVisionTransformer, BACKBONE, 'elliptical_layer',
     'elliptical_layers'),
    (EllipticalMaskTransformerHead, HEAD, 'relevance_reduce',
     'relevance_reduction'),
    (STAGED['mit'][0], STAGED['mit'][1], 'sr_ratio', 'sr_ratios'),
    (STAGED['pcpvt'][0], STAGED['pcpvt'][1], 'depth', 'depths'),
])
def test_misspelt_keyword_names_the_plugin_class(cls, arch, wrong,
                                                 right) -> None:
    with pytest.raises(TypeError) as info:
        cls(**arch, **{wrong: 1})
    assert str(info.value) == (f'{cls.__name__} got an unexpected keyword '
                               f"argument '{wrong}'; did you mean '{right}'?")


@pytest.mark.parametrize('which', ['backbone', 'mit'])
def test_backbone_rejects_wrong_channels_and_non_finite_images(which):
    cls, arch = MODULES.get(which) or STAGED[which]
    model = cls(**arch)
    with pytest.raises(
            ValueError,
            match=r'in_channels=3 but the images have '
            r'1 channel\(s\) \(shape \(2, 1, 32, 32\)\); .* '
            r'set backbone.in_channels=1'):
        model(torch.zeros(2, 1, 32, 32))
    x = torch.zeros(2, 3, 32, 32)
    x[0, 1, 3, 4], x[1, 2, 0, 0] = float('nan'), float('inf')
    with pytest.raises(
            ValueError,
            match=r'the input contains 2 NaN or '
            r'infinite values .* set backbone.check_finite=.never.'):
        model(x)
    out = cls(check_finite=False, **arch)(x)  # the check is an option
    assert not all(torch.isfinite(o).all() for o in out)


# ------------------------------------------------------------ check_finite


@pytest.mark.parametrize('value, mode', [(None, 'cpu'), ('cpu', 'cpu'),
                                         ('always', 'always'),
                                         (True, 'always'), ('never', 'never'),
                                         (False, 'never')])
def test_check_finite_modes_on_cpu(value, mode):
    """'cpu' (the default), 'always' (True) and 'never' (False); on the CPU
    the first two reject NaN input with a clear error, 'never' lets it
    through."""
    kwargs = {} if value is None else dict(check_finite=value)
    model = build('backbone', **kwargs)
    assert model.check_finite == mode
    x = torch.zeros(1, 3, 32, 32)
    x[0, 0, 0, 0] = float('nan')
    if mode == 'never':
        assert model(x)[0].isnan().any()
    else:
        with pytest.raises(ValueError, match='1 NaN or infinite values'):
            model(x)


@pytest.mark.parametrize('which', sorted(MODULES))
@pytest.mark.parametrize('value', ['gpu', 'Always', None, 1, 0, 'true'])
def test_bad_check_finite(which, value):
    with pytest.raises(ValueError) as info:
        build(which, check_finite=value)
    msg = str(info.value)
    assert f'{MODULES[which][0].__name__}: check_finite={value!r}' in msg
    assert str(CHECK_FINITE) in msg and 'True / False' in msg


@pytest.mark.parametrize('mode, reads_gpu', [('cpu', False), ('always', True),
                                             ('never', False)])
def test_check_finite_reads_device_values_only_when_always(mode, reads_gpu):
    """On another device (``meta``, where any read of the values raises, as
    a stand-in for a GPU, where it would synchronise) only 'always' reads
    them; on the CPU all but 'never' do."""
    meta = torch.empty(1, 3, 8, 8, device='meta')
    assert looks_at_values(meta, mode) is reads_gpu
    assert looks_at_values(torch.zeros(1), mode) is (mode != 'never')
    if reads_gpu:
        with pytest.raises(RuntimeError, match='meta'):
            check_images(meta, 'Owner', 3, mode)
    else:
        check_images(meta, 'Owner', 3, mode)  # metadata only
    model = build('backbone', check_finite=mode).to('meta').eval()
    with torch.no_grad():
        if reads_gpu:
            with pytest.raises(RuntimeError, match='meta'):
                model(torch.empty(1, 3, 32, 32, device='meta'))
        else:  # the whole forward runs without reading a value
            assert model(torch.empty(1, 3, 32, 32,
                                     device='meta'))[0].device.type == 'meta'


class Base:

    def __init__(self, depth=1, *, width=2):
        pass


class Middle(Base):

    def __init__(self, ratio=1., **kwargs):
        super().__init__(**kwargs)


class Top(Middle):

    def __init__(self, name='', *args, **kwargs):
        super().__init__(**kwargs)


class Open:

    def __init__(self, **kwargs):
        pass


def test_init_keywords_follow_kwargs_up_the_mro() -> None:
    """The one signature walk (the backbones' and the query heads' keyword
    checks): up to the first ``__init__`` without ``**kwargs``, or the whole
    MRO."""
    assert init_keywords(Top) == (['name', 'ratio', 'depth', 'width'], True)
    assert init_keywords(Base) == (['depth', 'width'], True)

    class Beyond:

        def __init__(self, extra=0):
            pass

    class After(Base, Beyond):  # Beyond's __init__ lies past Base's
        pass

    assert init_keywords(After) == (['depth', 'width'], True)
    assert init_keywords(After, whole_mro=True) == \
        (['depth', 'width', 'extra'], True)
    assert init_keywords(Top, whole_mro=True) == init_keywords(Top)
    assert init_keywords(Open) == ([], False)
    with pytest.raises(TypeError, match="'widht'; did you mean 'width'"):
        check_kwargs(Top, Top, dict(name='x', widht=3), own=[])
    check_kwargs(Top, Open, dict(anything=1), own=[])  # **kwargs: no check
