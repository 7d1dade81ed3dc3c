"""EllipticalEvidenceHook: what a short demo run logs to TensorBoard and the
local backend (the offline collapse tool's numbers on the checkpoint of
that iteration), weights bitwise equal with and without it (one process,
two under torchrun), and one clear error per bad argument."""
import glob
import json
import math
import os
import os.path as osp
import sys

import pytest
import torch
from builders import (BACKBONES, DEMO_DOT, DEMO_ELLIPTICAL, HAS_MMDET, ROOT,
                      tiny_config)
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from processes import run_command
from saved_models import family_config
from shipped_configs import sync_bn_to_bn, tiny_query_head

from mmseg_elliptical.analysis import measure_collapse
from mmseg_elliptical.errors import ConfigError
from mmseg_elliptical.utils.config import ModelSpec

pytestmark = pytest.mark.usefixtures('single_thread')

LAYERS = 3  # tiny_config's backbone
HOOK = dict(
    type='EllipticalEvidenceHook', interval=2, image_interval=4, num_images=3)


def hooked_config(path: str,
                  demo_root: str,
                  work_dir: str,
                  hook=HOOK,
                  **overrides):
    """The 4-iteration tiny demo run with the hook (None: without)."""
    cfg = tiny_config(path, demo_root, work_dir, **overrides)
    if hook is not None:
        cfg.custom_hooks = list(cfg.custom_hooks) + [dict(hook)]
    return cfg


def events(work_dir: str):
    """The scalars of the run's TensorBoard event files, read back with
    tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    files = glob.glob(
        osp.join(work_dir, '**', 'events.out.tfevents.*'), recursive=True)
    assert len(files) == 1, files
    acc = EventAccumulator(files[0], size_guidance={'scalars': 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()['scalars']}


@pytest.mark.slow
@pytest.mark.parametrize('path, elliptical', [(DEMO_ELLIPTICAL, True),
                                              (DEMO_DOT, False)])
def test_run_logs_the_offline_tools_numbers(demo_root, tmp_path, path,
                                            elliptical) -> None:
    work_dir = str(tmp_path / 'run')
    cfg = hooked_config(
        path,
        demo_root,
        work_dir,
        visualizer=dict(
            type='SegLocalVisualizer',
            vis_backends=[
                dict(type='LocalVisBackend'),
                dict(type='TensorboardVisBackend')
            ],
            name=f'evidence_{tmp_path.name}'))  # a new one (a singleton)
    cfg_file = str(tmp_path / 'cfg.py')
    cfg.dump(cfg_file)
    Runner.from_cfg(cfg).train()

    scalars = events(work_dir)
    measures = ['collapse', 'entropy'] + \
        (['m_mean', 'm_min', 'm_effective', 'm_spread'] if elliptical else [])
    layers = range(1, LAYERS) if elliptical else range(LAYERS)
    for measure in measures:
        for i in (range(LAYERS) if measure in ('collapse',
                                               'entropy') else layers):
            tag = f'{measure}/backbone/L{i}'
            assert [e.step for e in scalars[tag]] == [2, 4], tag
    if elliptical:  # layer 0 scores by dot product: no m
        assert 'm_mean/backbone/L0' not in scalars
    else:
        assert not any(t.startswith('m_') for t in scalars)

    offline = measure_collapse(
        ModelSpec('tool', cfg_file, osp.join(work_dir, 'iter_4.pth')),
        split='val',
        max_images=HOOK['num_images'],
        progress=False)
    for i in range(LAYERS):
        # TensorBoard keeps float32: equal to its precision
        assert scalars[f'collapse/backbone/L{i}'][-1].value == \
            pytest.approx(offline['cosine'][i], rel=1e-6, abs=1e-7)
        if elliptical and i > 0:
            for key in ('mean', 'min', 'effective', 'spread'):
                assert scalars[f'm_{key}/backbone/L{i}'][-1].value == \
                    pytest.approx(offline[f'relevance_{key}'][i],
                                  rel=1e-6, abs=1e-7)
    entropy = [
        scalars[f'entropy/backbone/L{i}'][-1].value for i in range(LAYERS)
    ]
    keys = 8 * 8 + 1  # the 8 x 8 patch grid and the cls token
    assert all(0 < e <= math.log(keys) + 1e-9 for e in entropy), entropy

    # The local backend: the same scalars in scalars.json, images at 4.
    vis_data = glob.glob(osp.join(work_dir, '*', 'vis_data'))[0]
    with open(osp.join(vis_data, 'scalars.json')) as f:
        lines = [json.loads(ln) for ln in f]
    logged = [ln for ln in lines if 'collapse/backbone/L0' in ln]
    assert [ln['step'] for ln in logged] == [2, 4]
    assert logged[-1]['collapse/backbone/L2'] == pytest.approx(
        scalars['collapse/backbone/L2'][-1].value, rel=1e-6)
    images = sorted(os.listdir(osp.join(vis_data, 'vis_image')))
    wanted = ['evidence_attention_backbone_4.png'] + [
        f'evidence_probe_{k}_4.png' for k in range(HOOK['num_images'])
    ] + (['evidence_m_backbone_4.png'] if elliptical else [])
    assert set(wanted) <= set(images), images
    # The attention: a row per layer, readable in TensorBoard at its default
    # size (not one strip of every layer's tiles).
    import cv2
    height, width = cv2.imread(
        osp.join(vis_data, 'vis_image',
                 'evidence_attention_backbone_4.png')).shape[:2]
    assert width < 2.5 * height, (width, height)
    assert not any(
        name.endswith('_2.png') and name.startswith('evidence')
        for name in images)


def final_weights(cfg) -> dict:
    runner = Runner.from_cfg(cfg)
    runner.train()
    return {k: v.clone() for k, v in runner.model.state_dict().items()}


DROPOUT = {
    'model.backbone.drop_rate': 0.1,
    'model.backbone.attn_drop_rate': 0.1,
    'model.backbone.drop_path_rate': 0.1,
    'randomness.seed': 0,
}


def test_schedule_of_scalars_and_images(demo_root, tmp_path,
                                        monkeypatch) -> None:
    from mmseg_elliptical.engine.hooks import EllipticalEvidenceHook
    calls = []
    monkeypatch.setattr(
        EllipticalEvidenceHook,
        'measure',
        lambda self, runner, step, images=False: calls.append((step, images)))
    cfg = hooked_config(
        DEMO_ELLIPTICAL,
        demo_root,
        str(tmp_path),
        dict(HOOK, interval=2, image_interval=3),
        **{
            'train_cfg.max_iters': 6,
            'train_cfg.val_interval': 4
        },
        experiment_name=f'schedule_{tmp_path.name}')
    Runner.from_cfg(cfg).train()
    # every 2 (scalars), every 3 (with images), after validating at 4 and
    # at the end (measure() skips a step it has measured)
    assert calls == [(2, False), (3, True), (4, False), (4, False), (6, True),
                     (6, False)]


@pytest.mark.slow
def test_weights_bitwise_equal_with_and_without_the_hook(demo_root,
                                                         tmp_path) -> None:
    hook = dict(HOOK, interval=1, image_interval=3)
    with_hook = final_weights(
        hooked_config(
            DEMO_ELLIPTICAL,
            demo_root,
            str(tmp_path / 'a'),
            hook,
            experiment_name='with_hook',
            **DROPOUT))
    without = final_weights(
        hooked_config(
            DEMO_ELLIPTICAL,
            demo_root,
            str(tmp_path / 'b'),
            None,
            experiment_name='without_hook',
            **DROPOUT))
    assert with_hook.keys() == without.keys()
    for key, value in with_hook.items():
        assert torch.equal(value, without[key]), key


@pytest.mark.slow
def test_weights_bitwise_equal_under_two_processes(demo_root,
                                                   tmp_path) -> None:
    checkpoints = []
    for name, hook in (('with', dict(HOOK, interval=1)), ('without', None)):
        cfg = hooked_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path / name),
                            hook, **DROPOUT)
        cfg_file = str(tmp_path / f'{name}.py')
        cfg.dump(cfg_file)
        run_command(
            [  # --standalone: torchrun picks its own free port
                sys.executable, '-m', 'torch.distributed.run', '--standalone',
                '--nproc_per_node=2', 'tools/train.py', cfg_file, '--launcher',
                'pytorch'
            ],
            timeout=600)
        checkpoints.append(
            torch.load(
                osp.join(tmp_path, name, 'iter_4.pth'),
                map_location='cpu',
                weights_only=False)['state_dict'])
    with_hook, without = checkpoints
    assert with_hook.keys() == without.keys()
    for key, value in with_hook.items():
        assert torch.equal(value, without[key]), key
    logs = glob.glob(
        osp.join(tmp_path, 'with', '*', 'vis_data', 'scalars.json'))
    assert len(logs) == 1  # rank 0 only
    with open(logs[0]) as f:
        steps = [
            json.loads(ln)['step'] for ln in f if 'collapse/backbone/L0' in ln
        ]
    assert steps == [1, 2, 3, 4]


@pytest.mark.parametrize('args, words', [
    (dict(interval=0), 'interval=0 must be a positive integer'),
    (dict(image_interval=-1), 'image_interval=-1'),
    (dict(num_images=0), 'num_images=0'),
    (dict(part='neck'), "part='neck' must be one of"),
    (dict(point=(3, -1)), 'point=(3, -1) must be two non-negative'),
])
def test_bad_arguments_when_the_hook_is_built(args, words) -> None:
    from mmseg.registry import HOOKS
    init_default_scope('mmseg')
    with pytest.raises(ConfigError) as err:
        HOOKS.build(dict(type='EllipticalEvidenceHook', **args))
    assert words in str(err.value)


@pytest.mark.parametrize('args, words', [
    (dict(num_images=5), 'num_images=5 but the validation set has 4'),
    (dict(point=(10, 64)), 'point=(10, 64) lies outside the first probe '
     'image (64 x 64'),
    (dict(point=(64, 0)), 'x is the column, 0..63'),
])
def test_bad_arguments_when_the_run_starts(demo_root, tmp_path, args,
                                           words) -> None:
    runner = Runner.from_cfg(
        hooked_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path),
                      dict(type='EllipticalEvidenceHook', **args)))
    with pytest.raises(ConfigError) as err:
        runner.train()
    assert words in str(err.value)
    assert runner.iter == 0


def test_a_part_the_model_lacks(demo_root, tmp_path) -> None:
    # An FCN decode head has no transformer layers.
    cfg = family_config('vit', demo_root, str(tmp_path))
    cfg.merge_from_dict({
        'train_cfg.max_iters': 2,
        'train_cfg.val_interval': 2
    })
    cfg.custom_hooks = [
        dict(type='EllipticalEvidenceHook', part='decode_head')
    ]
    runner = Runner.from_cfg(cfg)
    with pytest.raises(ConfigError) as err:
        runner.train()
    assert "part='decode_head'" in str(err.value)
    assert 'FCNHead' in str(err.value)
    assert runner.iter == 0


@pytest.mark.parametrize('path', [DEMO_ELLIPTICAL, DEMO_DOT])
def test_measure_leaves_the_model_and_the_random_state(demo_root, tmp_path,
                                                       path,
                                                       monkeypatch) -> None:
    import random

    import numpy as np

    from mmseg_elliptical.engine.hooks import (EllipticalEvidenceHook,
                                               evidence_hook)
    runner = Runner.from_cfg(
        hooked_config(
            path,
            demo_root,
            str(tmp_path),
            experiment_name=f'measure_{tmp_path.name}'))
    hook = [h for h in runner.hooks
            if isinstance(h, EllipticalEvidenceHook)][0]
    hook.before_run(runner)
    model = runner.model
    model.train()
    model.backbone.layers[1].eval()  # modes differ between modules
    modes = [m.training for m in model.modules()]
    classes = [type(m) for m in model.modules()]
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(evidence_hook, 'is_main_process', lambda: False)
    hook.measure(runner, 1, images=True)
    assert runner.message_hub.get_info('elliptical_evidence') is None
    monkeypatch.undo()
    rng = (random.random, np.random.rand, lambda: torch.rand(1).item())
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    hook.measure(runner, 2, images=True)
    logged = runner.message_hub.get_info('elliptical_evidence')
    assert len([k for k in logged if k.startswith('collapse/')]) == LAYERS
    assert [m.training for m in model.modules()] == modes
    assert [type(m) for m in model.modules()] == classes  # not converted
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    assert all(p.grad is None for p in model.parameters())
    random.setstate(states[0]), np.random.set_state(states[1])
    torch.set_rng_state(states[2])
    expected = [f() for f in rng]
    random.setstate(states[0]), np.random.set_state(states[1])
    torch.set_rng_state(states[2])
    hook.measure(runner, 3, images=True)
    assert [f() for f in rng] == expected


def test_a_measure_that_draws_random_numbers_leaves_every_generator(
        demo_root, tmp_path, monkeypatch) -> None:
    """A measure that draws from Python's, numpy's and torch's CPU
    generators: it draws the numbers training would have drawn next, and
    training still draws them after it."""
    import random

    import numpy as np

    from mmseg_elliptical.engine.hooks import (EllipticalEvidenceHook,
                                               evidence_hook)
    runner = Runner.from_cfg(
        hooked_config(
            DEMO_ELLIPTICAL,
            demo_root,
            str(tmp_path),
            experiment_name=f'draws_{tmp_path.name}'))
    hook = [h for h in runner.hooks
            if isinstance(h, EllipticalEvidenceHook)][0]
    hook.before_run(runner)
    entropy = evidence_hook.layer_entropy
    drawn = []

    def drawing(*args, **kwargs):
        drawn.append(draw())
        return entropy(*args, **kwargs)

    def draw() -> tuple:
        return random.random(), float(np.random.rand()), torch.rand(1).item()

    def seed() -> None:
        random.seed(5), np.random.seed(5), torch.manual_seed(5)

    monkeypatch.setattr(evidence_hook, 'layer_entropy', drawing)
    seed()
    expected = draw()
    seed()
    hook.measure(runner, 1)
    assert drawn == [expected]
    assert draw() == expected


def measured(cfg, tmp_path, hook: dict) -> tuple:
    """Build the runner of ``cfg`` with ``hook``, measure once at step 1
    (with images) and save the weights: ``(scalars, [config,
    checkpoint])``."""
    from mmengine.runner.checkpoint import save_checkpoint

    from mmseg_elliptical.datasets.demo_shapes import CLASSES, PALETTE
    from mmseg_elliptical.engine.hooks import EllipticalEvidenceHook
    cfg.custom_hooks = [hook]
    cfg.visualizer.name = f'family_{tmp_path.name}'
    runner = Runner.from_cfg(cfg)
    evidence = [
        h for h in runner.hooks if isinstance(h, EllipticalEvidenceHook)
    ][0]
    evidence.before_run(runner)
    evidence.measure(runner, 1, images=True)
    paths = [str(tmp_path / 'model.py'), str(tmp_path / 'model.pth')]
    cfg.dump(paths[0])
    save_checkpoint(
        dict(
            state_dict=runner.model.state_dict(),
            meta=dict(dataset_meta=dict(classes=CLASSES, palette=PALETTE))),
        paths[1])
    return runner.message_hub.get_info('elliptical_evidence'), paths


def check_tool_numbers(scalars: dict, paths: list, part: str,
                       images: int) -> None:
    """The logged collapse and m statistics are the offline tool's."""
    offline = measure_collapse(
        ModelSpec('tool', *paths),
        split='val',
        part=part,
        max_images=images,
        progress=False)
    n = len(offline['cosine'])
    width = len(str(n - 1))
    for i in range(n):
        layer = f'{part}/L{i:0{width}d}'
        assert scalars[f'collapse/{layer}'] == offline['cosine'][i]
        assert f'entropy/{layer}' in scalars
        for key in ('mean', 'min', 'effective', 'spread'):
            assert scalars.get(f'm_{key}/{layer}') == \
                offline[f'relevance_{key}'][i], (key, i)
    assert len(scalars) == 2 * n + 4 * sum(v is not None
                                           for v in offline['relevance_mean'])


@pytest.mark.parametrize('family', BACKBONES)
def test_every_family(demo_root, tmp_path, family) -> None:
    cfg = family_config(family, demo_root, str(tmp_path))
    hook = dict(type='EllipticalEvidenceHook', num_images=2, point=(5, 60))
    scalars, paths = measured(cfg, tmp_path, hook)
    check_tool_numbers(scalars, paths, 'backbone', 2)
    images = os.listdir(
        glob.glob(str(tmp_path / '*' / 'vis_data'))[0] + '/vis_image')
    assert {'evidence_attention_backbone_1.png',
            'evidence_m_backbone_1.png'} <= set(images)
    import cv2
    height, width = cv2.imread(
        glob.glob(str(tmp_path / '*' / 'vis_data'))[0] +
        '/vis_image/evidence_attention_backbone_1.png').shape[:2]
    assert width < 2.5 * height, (width, height)  # rows, not a strip


@pytest.mark.skipif(not HAS_MMDET, reason='needs mmdet (the extra)')
def test_mask2former_decoder(demo_root, tmp_path) -> None:
    from mmseg_elliptical.utils import load_config
    path = osp.join(
        ROOT, 'configs', 'mask2former',
        'mask2former_elliptical-swin-t_elliptical-mask_8xb2-160k_'
        'ade20k-512x512.py')
    cfg = tiny_config(DEMO_DOT, demo_root, str(tmp_path))
    model = load_config(path).model
    model.pretrained = None
    model.data_preprocessor = cfg.model.data_preprocessor
    model.backbone.embed_dims //= 4
    model.backbone.pop('init_cfg', None)
    model.backbone.pretrain_img_size = 64
    widths = [model.backbone.embed_dims * 2**i for i in range(4)]
    tiny_query_head(model.decode_head, widths, num_queries=8, num_points=64)
    model.decode_head.num_classes = 5
    model.decode_head.loss_cls.class_weight = [1.0] * 5 + [0.1]
    cfg.model = sync_bn_to_bn(model)
    hook = dict(
        type='EllipticalEvidenceHook', num_images=2, part='decode_head')
    scalars, paths = measured(cfg, tmp_path, hook)
    check_tool_numbers(scalars, paths, 'decode_head', 2)
    images = os.listdir(
        glob.glob(str(tmp_path / '*' / 'vis_data'))[0] + '/vis_image')
    assert 'evidence_m_decode_head_1.png' in images  # no grid: no map
    assert 'evidence_attention_decode_head_1.png' not in images


def test_segmenter_head_layers(demo_root, tmp_path) -> None:
    # mmseg's own head (measured on a converted copy), tokens on the
    # backbone's grid: maps as well as collapse.
    cfg = tiny_config(DEMO_ELLIPTICAL, demo_root, str(tmp_path))
    hook = dict(
        type='EllipticalEvidenceHook', num_images=2, part='decode_head')
    scalars, paths = measured(cfg, tmp_path, hook)
    check_tool_numbers(scalars, paths, 'decode_head', 2)
    assert 'collapse/decode_head/L1' in scalars
    images = os.listdir(
        glob.glob(str(tmp_path / '*' / 'vis_data'))[0] + '/vis_image')
    assert 'evidence_attention_decode_head_1.png' in images
