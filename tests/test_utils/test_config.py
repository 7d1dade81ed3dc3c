"""``utils/config.py``: ``model_specs`` / ``model_names`` name the tools'
(config, checkpoint) pairs; ``load_config`` reads a config (``mmseg::`` paths
through mmengine) with the overrides ``DictAction`` parses."""
import argparse
import os.path as osp

import pytest
from mmengine.config import DictAction
from mmengine.utils import get_installed_path

from mmseg_elliptical.utils import mmseg_tool_path
from mmseg_elliptical.utils.config import load_config, model_names, model_specs

SEGMENTER = 'segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'
MIM = osp.join(get_installed_path('mmsegmentation'), '.mim')


def cfg_options(*options):
    """What mmseg's tools get from ``--cfg-options OPTIONS``."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args(['--cfg-options', *options]).cfg_options


def test_load_config_resolves_mmseg_paths_and_merges_options():
    cfg = load_config(
        f'mmseg::{SEGMENTER}',
        cfg_options('model.backbone.num_layers=3',
                    'model.decode_head.num_classes=7'))
    assert cfg.filename == osp.join(MIM, 'configs', SEGMENTER)
    assert cfg.model.backbone.type == 'VisionTransformer'
    assert (cfg.model.backbone.num_layers,
            cfg.model.decode_head.num_classes) == (3, 7)
    # The URL mmseg's config downloads from is dropped only when asked.
    assert cfg.model.pretrained.startswith('http')
    assert load_config(
        f'mmseg::{SEGMENTER}', no_pretrained=True).model.pretrained is None


def test_load_config_names_a_missing_file(tmp_path):
    missing = str(tmp_path / 'nope.py')
    with pytest.raises(
            FileNotFoundError, match=rf'^config {missing} does not exist\.$'):
        load_config(missing)
    with pytest.raises(
            FileNotFoundError,
            match=r'config mmseg::segmenter/nope\.py does not exist.*'
            r'segmenter/nope\.py.*ships its configs under mmseg/\.mim'):
        load_config('mmseg::segmenter/nope.py')


def test_mmseg_tool_path():
    assert osp.samefile(
        mmseg_tool_path('train.py'), osp.join(MIM, 'tools', 'train.py'))
    assert osp.isfile(mmseg_tool_path('model_converters/vit2mmseg.py'))
    with pytest.raises(
            FileNotFoundError, match=r'does not ship tools/nope\.py.*install'):
        mmseg_tool_path('nope.py')


def test_model_specs_errors(demo_models):
    with pytest.raises(ValueError, match='pairs'):
        model_specs(demo_models[:3])
    with pytest.raises(ValueError, match='config first'):
        model_specs(demo_models[1::-1])
    with pytest.raises(ValueError, match='does not exist'):
        model_specs([demo_models[0], 'missing.pth'])
    specs = model_specs(demo_models)
    assert [s.name for s in specs] == ['ell', 'dot']


def test_model_names():
    assert model_names(['a/x.py', 'b/y.py']) == ['x', 'y']
    assert model_names(['a/x.py', 'b/x.py']) == ['x#0', 'x#1']
    assert model_names(['a/x.py'], ['ell']) == ['ell']
    with pytest.raises(ValueError, match='2 names for 1'):
        model_names(['a/x.py'], ['p', 'q'])
    with pytest.raises(ValueError, match='must differ'):
        model_names(['a/x.py', 'b/y.py'], ['p', 'p'])
