"""Every shipped config builds with nothing but its ``custom_imports``."""
import glob
import json
import os.path as osp
import subprocess
import sys

from mmengine.config import Config

from conftest import DEMO_DOT, DEMO_ELLIPTICAL, ROOT
from mmseg_elliptical.utils import mmseg_config_path

CONFIGS = sorted(
    glob.glob(osp.join(ROOT, 'configs', 'elliptical', '*.py')) +
    glob.glob(osp.join(ROOT, 'configs', 'demo', '*.py')))

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
    assert len(CONFIGS) == 9
    proc = subprocess.run([sys.executable, '-c', BUILD_ALL, *CONFIGS],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    for path, (backbone, head, _) in built.items():
        name = osp.basename(path)
        expected = ('EllipticalVisionTransformer'
                    if 'elliptical-' in name.split('_')[1] else
                    'VisionTransformer')
        assert backbone == expected, name
        expected = ('EllipticalMaskTransformerHead'
                    if '_elliptical-mask_' in name else
                    'SegmenterMaskTransformerHead')
        assert head == expected, name
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
    for var, path in (('DEMO_CONFIG', DEMO_ELLIPTICAL),
                      ('DEMO_DOT_CONFIG', DEMO_DOT)):
        line = [ln for ln in text.splitlines()
                if ln.startswith(f'{var} ?= ')]
        assert len(line) == 1, var
        assert osp.join(ROOT, line[0].split('?=')[1].strip()) == path
