"""Argument and input validation, and the registry error without the plugin.

Every new argument of the backbones, the head and the attentions is checked
when the module is built, and the error names the argument, the value and
what is allowed; a misspelt keyword names the plugin class and the closest
valid name; bad input at run time names the problem and the fix.
"""
import json
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from conftest import DEMO_ELLIPTICAL, ROOT, run_command
from mmseg.registry import MODELS

from mmseg_elliptical.models import (ConversionError, EllipticalAttention,
                                     EllipticalMaskTransformerHead,
                                     EllipticalMixVisionTransformer,
                                     EllipticalPCPVT,
                                     EllipticalVisionTransformer)

pytestmark = pytest.mark.usefixtures('single_thread')

BACKBONE = dict(
    img_size=32,
    patch_size=8,
    embed_dims=24,
    num_heads=3,
    num_layers=4,
    mlp_ratio=2)
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


# Runs in a fresh interpreter where mmseg_elliptical cannot be imported: the
# case of a config without ``custom_imports`` (or of the package missing).
MISSING_PLUGIN = r'''
import importlib.abc, json, sys
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'mmseg_elliptical':
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Block())
out = {}
try:  # the package is not installed, the config imports it
    Config.fromfile(sys.argv[1])
except Exception as e:
    out['installed'] = [type(e).__name__, str(e)]
# the config has no custom_imports
cfg = Config.fromfile(sys.argv[1], import_custom_modules=False)
cfg.pop('custom_imports')
init_default_scope('mmseg')
try:
    MODELS.build(cfg.model)
except Exception as e:
    out['custom_imports'] = [type(e).__name__, str(e)]
out['loaded'] = 'mmseg_elliptical' in sys.modules
print(json.dumps(out))
'''


def test_registry_error_without_the_plugin() -> None:
    proc = run_command([sys.executable, '-c', MISSING_PLUGIN, DEMO_ELLIPTICAL])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out['loaded'] is False
    kind, msg = out['installed']
    assert kind == 'ImportError'
    assert "Failed to import custom modules from {'imports': " \
        "['mmseg_elliptical']" in msg
    kind, msg = out['custom_imports']
    assert kind == 'KeyError'
    assert ('EllipticalVisionTransformer is not in the mmseg::model registry'
            in msg)
    # The wording that the README's troubleshooting section quotes.
    with open(osp.join(ROOT, 'README.md'), encoding='utf-8') as doc:
        text = doc.read()
    assert 'is not in the mmseg::model registry' in text
    assert 'Failed to import custom modules' in text


@pytest.mark.parametrize('shape, dtype', [((3, 32, 32), torch.float32),
                                          ((1, 3, 32, 32), torch.uint8)])
def test_backbone_rejects_bad_images(shape, dtype) -> None:
    model = build('backbone')
    with pytest.raises(
            ValueError,
            match=r'expects a float batch of images '
            r'\[B, C, H, W\], got shape'):
        model(torch.zeros(shape, dtype=dtype))


def test_head_rejects_wrong_channels() -> None:
    head = build('head')
    with pytest.raises(
            ValueError,
            match=r'in_channels=24 but the input '
            r'feature map has shape \(1, 16, 4, 4\)'):
        head([torch.randn(1, 16, 4, 4)])
    assert head([torch.randn(1, 24, 4, 4)]).shape == (1, 5, 4, 4)


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


@pytest.mark.parametrize('kwargs, match', [
    (dict(relevance_reduction='max'), 'relevance_reduction'),
    (dict(relevance_eps=0), 'relevance_eps'),
    (dict(relevance_eps=float('nan')), 'relevance_eps'),
])
def test_bad_attention_arguments(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        EllipticalAttention(24, 3, **kwargs)


def test_unconvertible_attention_settings() -> None:
    with pytest.raises(ConversionError, match='batch_first=True only'):
        EllipticalAttention(24, 3, batch_first=False)


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


def test_head_rejects_non_finite_features() -> None:
    head = build('head')
    feats = torch.randn(1, 24, 4, 4)
    feats[0, 0, 0, 0] = float('nan')
    with pytest.raises(
            ValueError,
            match='features contain NaN or infinite '
            'values.*decode_head.check_finite=.never.'):
        head([feats])
    assert build('head', check_finite=False)([feats]).isnan().any()
