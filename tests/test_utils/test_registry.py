"""``utils/registry.py`` and ``utils/unknown_types.py``: a config ``type``
no registry holds is one line naming the type, the registry and the closest
registered names."""
import pytest
from builders import DEMO_ELLIPTICAL
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmseg.registry import MODELS

import mmseg_elliptical  # noqa: F401 (registers the plugin)
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.utils.registry import check_model_types
from mmseg_elliptical.utils.unknown_types import (registry_error,
                                                  unknown_type_error)


def mmengine_error(cfg: dict) -> KeyError:
    """The KeyError mmengine raises on building ``cfg`` in mmseg's scope."""
    with DefaultScope.overwrite_default_scope('mmseg'):
        with pytest.raises(KeyError) as error:
            MODELS.build(cfg)
    return error.value


def test_a_typo_names_the_type_the_registry_and_the_closest_names():
    error = registry_error(
        mmengine_error(dict(type='EllipticVisionTransformer')))
    text = str(error)
    assert isinstance(error, ConfigError) and '\n' not in text
    assert text.startswith("type='EllipticVisionTransformer' is not in the "
                           'mmseg::model registry (closest registered: '
                           'EllipticalVisionTransformer'), text
    close = text.split('closest registered: ')[1].split(')')[0].split(', ')
    assert all(MODELS.get(name) is not None for name in close)
    assert 'custom_imports' in text


def test_a_typo_deep_in_a_nested_build_is_found_too():
    # mmengine wraps the inner KeyError in the outer class's message.
    cfg = Config.fromfile(DEMO_ELLIPTICAL).model
    cfg.decode_head.loss_decode.type = 'CrossEntropyLos'
    cfg.backbone.init_cfg = None
    text = str(registry_error(mmengine_error(cfg)))
    assert text.startswith("type='CrossEntropyLos' is not in the mmseg::model"
                           ' registry (closest registered: CrossEntropyLoss')


def test_a_typo_of_a_type_only_mmengines_registry_holds():
    """``SyncBN`` is registered in mmengine's ``MODELS`` (mmseg's parent)
    only: the suggestions search the parents too."""
    assert 'SyncBN' not in MODELS.module_dict
    assert "type='SynBN' is not in the mmseg::model registry (closest " \
        'registered: SyncBN' in str(unknown_type_error('SynBN', 'mmseg',
                                                       'model'))


@pytest.mark.parametrize('key', [
    'model.backbone.norm_cfg.type', 'model.backbone.act_cfg.type',
    'model.decode_head.loss_decode.type'
])
def test_check_model_types_reads_the_layers_too(key):
    """mmcv's ``build_norm_layer`` raises "Cannot find None in registry"
    for an unknown norm, without its name: checked before building."""
    cfg = Config.fromfile(DEMO_ELLIPTICAL)
    cfg.merge_from_dict({key: 'SynBN'})
    if 'loss' in key:  # not a layer config: left to the build
        check_model_types(cfg)
        return
    with pytest.raises(ConfigError) as error:
        check_model_types(cfg)
    assert str(error.value).startswith(
        "type='SynBN' is not in the mmseg::model registry (closest "
        'registered: SyncBN')


def test_other_errors_are_left_alone():
    assert registry_error(KeyError('backbone')) is None
    assert registry_error(
        ValueError('X is not in the mmseg::model '
                   'registry')) is None
    assert 'no registered name is close' in str(
        unknown_type_error('Qqqqqqqq', 'mmseg', 'model'))


@pytest.mark.parametrize('part, key', [('model', 'type'),
                                       ('model.backbone', 'type'),
                                       ('model.decode_head', 'type')])
def test_check_model_types_without_building(part, key):
    cfg = Config.fromfile(DEMO_ELLIPTICAL)
    check_model_types(cfg)  # the shipped config passes
    cfg.merge_from_dict({f'{part}.{key}': 'NoSuchModule'})
    with pytest.raises(ConfigError, match="type='NoSuchModule' is not in "):
        check_model_types(cfg)
    cfg = Config.fromfile(DEMO_ELLIPTICAL)
    cfg.model.auxiliary_head = [dict(type='FCNHead'), dict(type='FCNHaed')]
    with pytest.raises(ConfigError, match='closest registered: FCNHead'):
        check_model_types(cfg)
