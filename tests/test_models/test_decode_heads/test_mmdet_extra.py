"""Without mmdet: the plugin imports, KNet builds, and every MaskFormer /
Mask2Former config (and the plugin's heads) fails with the install hint
instead of mmseg's ``unexpected keyword argument 'in_channels'``.

mmdet's absence is simulated in a fresh interpreter (``sys.modules['mmdet'] =
None`` makes every import of it fail), so these tests run with the extra
installed too.
"""
import json
import os.path as osp
import sys

import pytest
from builders import MMDET_CONFIG_DIRS
from mmseg.models.decode_heads import Mask2FormerHead, MaskFormerHead
from mmseg.registry import MODELS
from processes import run_command
from shipped_configs import config_paths

from mmseg_elliptical.models.decode_heads import (MMDET_AVAILABLE,
                                                  register_mmdet_placeholders)

MMDET_CONFIGS = config_paths(*MMDET_CONFIG_DIRS)
KNET = config_paths('knet')

WITHOUT_MMDET = r'''
import json, sys
sys.modules['mmdet'] = None  # every import of mmdet now fails
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmseg.registry import MODELS
init_default_scope('mmseg')


def build(path):
    cfg = Config.fromfile(path)  # imports the plugin (custom_imports)
    cfg.model.pretrained = None
    cfg.model.backbone.pop('init_cfg', None)
    cfg.model.backbone.depths = [1, 1, 1, 1]  # builds faster
    try:
        return type(MODELS.build(cfg.model).decode_head).__name__
    except Exception as e:
        return f'{type(e).__name__}: {e}'


out = {}
# mmseg's own config, before the plugin is imported: mmseg's trap
out['trap'] = build(sys.argv[1])
out['configs'] = {p: build(p) for p in sys.argv[2:]}
import mmseg_elliptical  # noqa: F401, E402
from mmseg_elliptical.models import EllipticalMask2FormerHead  # noqa: E402
out['after_import'] = build(sys.argv[1])
try:
    EllipticalMask2FormerHead(in_channels=[8], feat_channels=8,
                              out_channels=8, num_classes=2)
except ImportError as e:
    out['head'] = str(e)
print(json.dumps(out))
'''
HINT = ("needs mmdet, which is not installed (mmseg's MaskFormer and "
        "Mask2Former heads subclass mmdet's). Install the plugin's extra: pip "
        "install -e '.[mmdet]'")


@pytest.mark.slow  # a subprocess
def test_without_mmdet_configs_fail_with_the_install_hint(tmp_path):
    # mmseg's own config (no custom_imports, unlike its Mask2Former Swin-T/S
    # configs, whose custom_imports of mmdet.models fail at loading)
    mmseg_only = tmp_path / 'mmseg_maskformer.py'
    mmseg_only.write_text(
        "_base_ = ['mmseg::maskformer/maskformer_swin-t_upernet_8xb2-160k_"
        "ade20k-512x512.py']\n")
    proc = run_command([
        sys.executable, '-c', WITHOUT_MMDET,
        str(mmseg_only), *MMDET_CONFIGS, *KNET
    ],
                       timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # mmseg alone: its silent fallback to BaseModule
    assert "unexpected keyword argument 'in_channels'" in result['trap']
    assert len(MMDET_CONFIGS) == 14
    for path in MMDET_CONFIGS:
        message = result['configs'][path]
        head = 'Mask2FormerHead' if osp.basename(path).startswith(
            'mask2former_') else 'MaskFormerHead'
        if '_elliptical-mask_' in osp.basename(path):
            head = 'Elliptical' + head
        assert message == f'ImportError: {head} {HINT}' + (
            " in its checkout (or pip install mmdet==3.3.0, the version that "
            'installs beside mmcv 2.1.0 and mmseg 1.2.2).'), path
    for path in KNET:  # KNet's heads are mmseg's own
        assert result['configs'][path] == 'IterativeDecodeHead'
    assert result['after_import'].startswith(
        f'ImportError: MaskFormerHead {HINT}')
    assert result['head'].startswith(f'EllipticalMask2FormerHead {HINT}')


def test_placeholders_only_replace_the_fallback():
    """Here (mmdet importable or not, as installed): with mmdet the registry
    holds mmseg's heads and a second registration changes nothing; without
    it, the placeholders."""
    registered = register_mmdet_placeholders()
    assert registered == {}  # done once, at the plugin's import
    for head in (MaskFormerHead, Mask2FormerHead):
        entry = MODELS.module_dict[head.__name__]
        if MMDET_AVAILABLE:
            assert entry is head
            assert head.__mro__[1].__module__.startswith('mmdet.')
        else:
            assert entry is not head and entry.__name__ == head.__name__
