"""Every shipped config builds with nothing but its ``custom_imports`` and is
mmseg's own config plus the keys that change; without the plugin the
error names what is missing."""
import glob
import json
import os.path as osp
import sys

import pytest
from builders import (DEMO_DOT, DEMO_ELLIPTICAL, HAS_MMDET, MMDET_CONFIG_DIRS,
                      ROOT)
from mmengine.config import Config
from processes import run_command
from shipped_configs import mmseg_base, mmseg_config_file, mmseg_names

CONFIGS = sorted(
    p for p in glob.glob(osp.join(ROOT, 'configs', '*', '*.py'))
    if osp.basename(osp.dirname(p)) != '_base_')
FAMILY = [p for p in CONFIGS if '/demo/' not in p]
# MaskFormer / Mask2Former need the mmdet extra (without it they fail with the
# install hint: tests/test_models/test_decode_heads/test_mmdet_extra.py)
BUILDABLE = [
    p for p in CONFIGS
    if HAS_MMDET or osp.basename(osp.dirname(p)) not in MMDET_CONFIG_DIRS
]
MMSEG_NAMES = mmseg_names()

# Runs in a fresh interpreter that never imports mmseg_elliptical itself.
BUILD_ALL = r'''
import json, sys
from mmengine.config import Config
from mmseg.registry import MODELS
assert 'mmseg_elliptical' not in sys.modules
out = {}
for path in sys.argv[1:]:
    cfg = Config.fromfile(path)  # applies custom_imports
    cfg.model.pretrained = None
    cfg.model.backbone.pop('init_cfg', None)
    model = MODELS.build(cfg.model)
    out[path] = [type(model.backbone).__name__,
                 type(model.decode_head).__name__]
    del model
print(json.dumps(out))
'''


def drop_scope(obj):
    """Remove the ``_scope_`` keys mmengine adds to ``mmseg::`` bases."""
    if isinstance(obj, dict):
        return {k: drop_scope(v) for k, v in obj.items() if k != '_scope_'}
    if isinstance(obj, (list, tuple)):
        return type(obj)(drop_scope(v) for v in obj)
    return obj


def flatten(d, prefix=''):
    """``{'a': {'b': 1}}`` -> ``{'a.b': 1}`` (lists kept whole)."""
    items = {}
    for k, v in drop_scope(d).items():
        if isinstance(v, dict):
            items.update(flatten(v, f'{prefix}{k}.'))
        else:
            items[f'{prefix}{k}'] = v
    return items


@pytest.mark.slow  # a subprocess builds every config
def test_every_config_builds_through_custom_imports():
    proc = run_command([sys.executable, '-c', BUILD_ALL, *BUILDABLE])
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(built) == set(BUILDABLE)
    for path, (backbone, head) in built.items():
        name = osp.basename(path)
        expected = Config.fromfile(path).model.backbone.type
        assert backbone == expected, name
        assert (backbone in MMSEG_NAMES) == ('elliptical-' in name), name
        assert head.startswith('Elliptical') == ('_elliptical-mask_'
                                                 in name), name


@pytest.mark.parametrize('path', FAMILY, ids=osp.basename)
def test_configs_are_mmseg_configs_plus_the_attention(path):
    """The name is mmseg's with ``elliptical-`` before the backbone, and
    only the backbone (or head) type changes, but for the authors' recipe."""
    base = mmseg_base(path)
    name = osp.basename(path)
    assert name.replace('elliptical-', '', 1) == osp.basename(base) or (
        'deit-t' in name or '_elliptical-mask_' in name)
    ours = flatten(Config.fromfile(path).to_dict())
    # mmseg's Mask2Former Swin-T/S configs import mmdet.models: not needed
    # to compare the keys (and the extra may be missing)
    theirs = flatten(
        Config.fromfile(mmseg_config_file(base),
                        import_custom_modules=False).to_dict())
    changed = {
        k
        for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)
    }
    if 'deit-t' in name:  # the authors' recipe: see test_authors_recipe
        return
    expected = {
        'model.backbone.type', 'custom_imports.imports',
        'custom_imports.allow_failed_imports'
    }
    if '_elliptical-mask_' in name:
        expected.add('model.decode_head.type')
    if theirs.get('custom_imports.allow_failed_imports') is False:
        # mmseg's Mask2Former Swin-T/S import mmdet.models (mmseg's
        # Mask2Former head imports it; ours name the extra without it)
        expected.discard('custom_imports.allow_failed_imports')
    assert changed == expected
    assert MMSEG_NAMES[ours['model.backbone.type']] == \
        theirs['model.backbone.type']


def test_demo_twins_differ_only_in_backbone_type():
    ours = flatten(Config.fromfile(DEMO_ELLIPTICAL).to_dict())
    dot = flatten(Config.fromfile(DEMO_DOT).to_dict())
    changed = {
        k
        for k in ours.keys() | dot.keys() if ours.get(k) != dot.get(k)
    }
    assert changed == {'model.backbone.type'}


def test_authors_recipe():
    cfg = Config.fromfile(
        osp.join(
            ROOT, 'configs', 'segmenter',
            'segmenter_elliptical-deit-t_mask_8xb1-160k_'
            'ade20k-512x512.py'))
    opt = cfg.optim_wrapper.optimizer
    assert (opt.type, opt.lr, opt.momentum, opt.weight_decay) == ('SGD', 1e-3,
                                                                  0.9, 0.0)
    poly = cfg.param_scheduler[0]
    assert (poly.type, poly.power, poly.eta_min) == ('PolyLR', 0.9, 1e-5)
    assert cfg.model.test_cfg.mode == 'slide'
    assert tuple(cfg.model.test_cfg.stride) == (512, 512)
    assert tuple(cfg.crop_size) == (512, 512)
    assert cfg.model.backbone.embed_dims == 192
    assert cfg.model.backbone.type == 'EllipticalVisionTransformer'


def test_metafile_lists_every_config():
    import yaml
    with open(osp.join(ROOT, 'configs', 'metafile.yaml')) as f:
        meta = yaml.safe_load(f)
    listed = {osp.join(ROOT, m['Config']) for m in meta['Models']}
    assert listed == set(CONFIGS)
    for model in meta['Models']:
        assert model['Name'] == osp.basename(model['Config'])[:-3]
        for value in model.get('Results', {}).get('Metrics', {}).values():
            assert isinstance(value, float)


def test_demo_schedule_is_consistent():
    cfg = Config.fromfile(DEMO_ELLIPTICAL)
    last = cfg.train_cfg.max_iters
    warmup, decay = cfg.param_scheduler
    assert warmup.begin == 0 and warmup.end == decay.begin
    assert decay.end == last and decay.eta_min == 0
    # validated (and checkpointed) at the last iteration
    assert last % cfg.train_cfg.val_interval == 0
    assert last % cfg.default_hooks.checkpoint.interval == 0
    # the run ends with the summary, whose table needs per-class IoU
    assert [h.type for h in cfg.custom_hooks] == ['SegSummaryHook']
    assert cfg.val_evaluator.type == 'PerClassIoUMetric'
    # a ViT on patches of 8 pixels over the whole 64x64 scene
    assert cfg.model.backbone.patch_size == 8
    assert tuple(cfg.model.backbone.img_size) == tuple(cfg.crop_size)
    assert cfg.model.test_cfg.mode == 'whole'


def test_makefile_demo_targets_name_the_demo_configs():
    with open(osp.join(ROOT, 'Makefile')) as f:
        text = f.read()
    for var, path in (('DEMO_CONFIG', DEMO_ELLIPTICAL), ('DEMO_DOT_CONFIG',
                                                         DEMO_DOT)):
        line = [ln for ln in text.splitlines() if ln.startswith(f'{var} ?= ')]
        assert len(line) == 1, var
        assert osp.join(ROOT, line[0].split('?=')[1].strip()) == path


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


@pytest.mark.slow  # a subprocess
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
    # The wording that docs/troubleshooting.md quotes.
    with open(
            osp.join(ROOT, 'docs', 'troubleshooting.md'),
            encoding='utf-8') as doc:
        text = doc.read()
    assert 'is not in the mmseg::model registry' in text
    assert 'Failed to import custom modules' in text


@pytest.mark.parametrize('path', [DEMO_ELLIPTICAL, DEMO_DOT])
def test_demo_tensorboard_configs_add_only_the_hook_and_backend(path):
    twin = flatten(Config.fromfile(path).to_dict())
    tb_cfg = Config.fromfile(path[:-3] + '_tensorboard.py')
    tb = flatten(tb_cfg.to_dict())
    changed = {k for k in twin.keys() | tb.keys() if twin.get(k) != tb.get(k)}
    assert changed == {'custom_hooks', 'visualizer.vis_backends'}
    assert [h['type'] for h in tb_cfg.custom_hooks
            ] == ['SegSummaryHook', 'EllipticalEvidenceHook']
    assert [b['type'] for b in tb_cfg.visualizer.vis_backends
            ] == ['LocalVisBackend', 'TensorboardVisBackend']
