"""Every shipped config builds with nothing but its ``custom_imports``."""
import glob
import json
import os.path as osp
import subprocess
import sys

from mmengine.config import Config

from conftest import DEMO_DOT, DEMO_ELLIPTICAL, ROOT
from mmseg_elliptical.utils import mmseg_config_path

FAMILY_DIRS = ('elliptical', 'demo', 'swin', 'beit', 'mae')
CONFIGS = sorted(p for d in FAMILY_DIRS
                 for p in glob.glob(osp.join(ROOT, 'configs', d, '*.py')))
# The backbone token of a config name (``elliptical-<family>-...``) and the
# class it builds.
BACKBONES = {
    'vit': 'EllipticalVisionTransformer',
    'deit': 'EllipticalVisionTransformer',
    'swin': 'EllipticalSwinTransformer',
    'beit': 'EllipticalBEiT',
    'mae': 'EllipticalMAE',
}
# Configs of other families: (ours, mmseg's base) under configs/ and mmseg::.
FAMILY_CONFIGS = [
    (f'swin/elliptical-swin-{s}-patch4-window7-in1k-pre_upernet_8xb2-160k_'
     'ade20k-512x512.py', f'swin/swin-{s}-patch4-window7-in1k-pre_upernet_'
     '8xb2-160k_ade20k-512x512.py') for s in ('tiny', 'small', 'base')
] + [
    ('beit/elliptical-beit-base_upernet_8xb2-160k_ade20k-640x640.py',
     'beit/beit-base_upernet_8xb2-160k_ade20k-640x640.py'),
    ('mae/elliptical-mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py',
     'mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py'),
]


def expected_types(name):
    """The backbone and head classes a config name promises."""
    tokens = name.split('_')
    backbone = next((t for t in tokens if t.startswith('elliptical-')
                     and t != 'elliptical-mask'), None)
    backbone = ('VisionTransformer' if backbone is None else
                BACKBONES[backbone.split('-')[1]])
    if 'upernet' in tokens:
        head = 'UPerHead'
    elif 'elliptical-mask' in tokens:
        head = 'EllipticalMaskTransformerHead'
    else:
        head = 'SegmenterMaskTransformerHead'
    return backbone, head


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
    model = MODELS.build(cfg.model)
    out[path] = [type(model.backbone).__name__,
                 type(model.decode_head).__name__,
                 sum(p.numel() for p in model.parameters())]
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


def test_all_configs_build_through_custom_imports():
    assert len(CONFIGS) == 14
    proc = subprocess.run([sys.executable, '-c', BUILD_ALL, *CONFIGS],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(built) == len(CONFIGS)
    for path, (backbone, head, _) in built.items():
        name = osp.basename(path)[:-3]
        assert (backbone, head) == expected_types(name), name
    # Elliptical attention adds no parameters.
    sizes = {osp.basename(p): n for p, (_, _, n) in built.items()}
    for s in 'tsb':
        assert len({
            sizes[f'segmenter_elliptical-vit-{s}_mask_8xb1-160k_'
                  'ade20k-512x512.py'],
            sizes[f'segmenter_elliptical-vit-{s}_elliptical-mask_8xb1-160k_'
                  'ade20k-512x512.py']
        }) == 1


def test_elliptical_configs_change_only_the_attention():
    for s in 'tsb':
        ours = Config.fromfile(
            osp.join(ROOT, 'configs', 'elliptical',
                     f'segmenter_elliptical-vit-{s}_mask_8xb1-160k_'
                     'ade20k-512x512.py'))
        base = Config.fromfile(
            mmseg_config_path(f'mmseg::segmenter/segmenter_vit-{s}_mask_'
                              '8xb1-160k_ade20k-512x512.py'))
        a, b = flatten(ours.to_dict()), flatten(base.to_dict())
        changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        assert changed == {'model.backbone.type', 'custom_imports.imports',
                           'custom_imports.allow_failed_imports'}
        assert a['model.backbone.type'] == 'EllipticalVisionTransformer'


def test_family_configs_change_only_the_backbone_type():
    for ours, base in FAMILY_CONFIGS:
        a = flatten(Config.fromfile(osp.join(ROOT, 'configs', ours))
                    .to_dict())
        b = flatten(Config.fromfile(mmseg_config_path(f'mmseg::{base}'))
                    .to_dict())
        changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        assert changed == {'model.backbone.type', 'custom_imports.imports',
                           'custom_imports.allow_failed_imports'}, ours
        assert a['model.backbone.type'] == 'Elliptical' + b[
            'model.backbone.type'], ours
        # Named as mmseg's config with the backbone token prefixed.
        assert osp.basename(ours) == 'elliptical-' + osp.basename(base)


def test_demo_twins_differ_only_in_backbone_type():
    ours = flatten(Config.fromfile(DEMO_ELLIPTICAL).to_dict())
    dot = flatten(Config.fromfile(DEMO_DOT).to_dict())
    changed = {k for k in ours.keys() | dot.keys()
               if ours.get(k) != dot.get(k)}
    assert changed == {'model.backbone.type'}


def test_authors_recipe():
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs', 'elliptical',
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
