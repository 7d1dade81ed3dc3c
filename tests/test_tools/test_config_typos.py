"""A config ``type`` that no registry holds ends every tool with one line
naming the type, the registry and the closest names: the plugin's tools
and mmseg's train.py / test.py with the plugin loaded."""
import os.path as osp
import sys

import pytest
from builders import ROOT
from mmengine.config import Config
from processes import load_tool, refused, run_tool_main

import mmseg_elliptical  # noqa: F401

TYPO = "type='EllipticVisionTransformer' is not in the mmseg::model " \
    'registry (closest registered: EllipticalVisionTransformer'


@pytest.fixture(scope='module')
def typos(demo_models, tmp_path_factory) -> dict:
    """The demo config with a misspelt backbone type, with a misspelt loss
    type (found only when the model is built), and with a misspelt norm type
    (registered in mmengine's registry only)."""
    tmp = tmp_path_factory.mktemp('typos')
    paths = {}
    for name, key, value in (('backbone', 'model.backbone.type',
                              'EllipticVisionTransformer'),
                             ('loss', 'model.decode_head.loss_decode.type',
                              'CrossEntropyLos'),
                             ('norm', 'model.backbone.norm_cfg.type',
                              'SynBN')):
        cfg = Config.fromfile(demo_models[0])
        cfg.merge_from_dict({key: value, 'work_dir': str(tmp / 'wd')})
        paths[name] = str(tmp / f'{name}.py')
        cfg.dump(paths[name])
    return paths


def forbidden(*args, **kwargs):
    raise AssertionError('work started before the config was checked')


@pytest.mark.parametrize('tool', ['train.py', 'test.py'])
def test_mmseg_tools_name_a_misspelt_backbone_before_any_work(
        tool, typos, demo_models, capsys, monkeypatch):
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    argv = [typos['backbone']
            ] + ([demo_models[1]] if tool == 'test.py' else [])
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, tool, *args), argv)
    assert f'{typos["backbone"]}: {TYPO}' in line, line


def test_train_names_a_misspelt_type_found_while_building(
        typos, capsys, monkeypatch):
    with pytest.raises(SystemExit) as stop:
        run_tool_main(monkeypatch, 'train.py', typos['loss'])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and 'Traceback' not in err, err
    assert "train.py: error: type='CrossEntropyLos' is not in the " \
        'mmseg::model registry (closest registered: CrossEntropyLoss' \
        in err.strip().splitlines()[-1], err


@pytest.mark.parametrize('path, argv', [
    ('analysis_tools/robustness.py', '{backbone} {ckpt}'),
    ('analysis_tools/collapse.py', '{backbone} {ckpt}'),
    ('analysis_tools/compare_models.py', '{ok} {ckpt} {backbone} {ckpt}'),
    ('deployment/pytorch2onnx.py', '{backbone}'),
])
def test_the_plugins_tools_name_a_misspelt_type(path, argv, typos, demo_models,
                                                capsys, monkeypatch):
    tool = load_tool(path)
    if path.startswith('deployment'):
        monkeypatch.setattr(tool, 'require_deploy', lambda *a: None)
    argv = argv.format(
        backbone=typos['backbone'], ok=demo_models[0],
        ckpt=demo_models[1]).split()
    line = refused(capsys, tool.main, argv)
    assert TYPO in line, line


@pytest.mark.parametrize('tool, argv', [
    ('analysis_tools/robustness.py', '{backbone} {ckpt}'),
    ('train.py', '{backbone}'),
])
def test_the_launch_check_names_a_misspelt_type(tool, argv, typos, demo_models,
                                                capsys, monkeypatch):
    # tools/check_args.py, which dist_launch.sh runs before torchrun.
    monkeypatch.syspath_prepend(osp.join(ROOT, 'tools'))
    monkeypatch.setattr(sys, 'argv', list(sys.argv))
    # check_args sets it for the torchrun that would follow: not for the
    # tests after this one (a --launcher refusal relies on it being off).
    monkeypatch.setattr('mmseg_elliptical.utils.preflight.LAUNCHING', False)
    import check_args
    argv = argv.format(backbone=typos['backbone'], ckpt=demo_models[1])
    line = refused(capsys, check_args.main, [tool, *argv.split()])
    assert TYPO in line, line


#: The norm typo's line: mmengine's registry, mmseg's parent, holds SyncBN.
NORM_TYPO = "type='SynBN' is not in the mmseg::model registry (closest " \
    'registered: SyncBN'


@pytest.mark.parametrize('tool', ['train.py', 'analysis_tools/collapse.py'])
def test_a_misspelt_norm_is_named_with_mmengines_names(tool, typos,
                                                       demo_models, capsys,
                                                       monkeypatch):
    """mmcv's ``build_norm_layer`` would raise "Cannot find None in
    registry", naming no type."""
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    if tool == 'train.py':
        line = refused(capsys,
                       lambda args: run_tool_main(monkeypatch, tool, *args),
                       [typos['norm']])
    else:
        line = refused(capsys,
                       load_tool(tool).main, [typos['norm'], demo_models[1]])
    assert NORM_TYPO in line, line


@pytest.mark.parametrize('hooks, words', [
    ([
        dict(
            type='AdversarialTrainingHook',
            attack=dict(name='pgd', eps=4, steps=1, step_size=4),
            ratoi=1.)
    ], "custom_hooks[0]: AdversarialTrainingHook got an unexpected keyword "
     "argument 'ratoi'; did you mean 'ratio'?"),
    ([dict(type='SegSummaryHook', num_scene=6)
      ], "custom_hooks[0]: SegSummaryHook got an unexpected keyword argument "
     "'num_scene'; did you mean 'num_scenes'?"),
    ([dict(type='SegSumaryHook')
      ], "custom_hooks[0]: type='SegSumaryHook' is not in the mmseg::hook "
     'registry (closest registered: SegSummaryHook'),
    ([dict(type='SegSummaryHook'),
      dict(type='AdversarialTrainingHook')
      ], 'custom_hooks[1]: AdversarialTrainingHook needs attack= (missing'),
    ([
        dict(
            type='AdversarialTrainingHook',
            attack=dict(name='pgd', eps=400, steps=1, step_size=4))
    ], "custom_hooks[0]: AdversarialTrainingHook: attack eps: '400' is above "
     '255'),
])
def test_train_names_a_hook_typo_before_any_work(hooks, words, demo_models,
                                                 tmp_path, capsys,
                                                 monkeypatch):
    """mmengine builds the hooks with the runner: a misspelt keyword was a
    ``TypeError`` traceback after the model, the data and the log were set
    up (36 s and 318 lines in the newcomer's trial)."""
    monkeypatch.setattr('mmengine.runner.Runner.from_cfg', forbidden)
    cfg = Config.fromfile(demo_models[0])
    cfg.custom_hooks = hooks
    path = str(tmp_path / 'hooks.py')
    cfg.dump(path)
    line = refused(capsys,
                   lambda args: run_tool_main(monkeypatch, 'train.py', *args),
                   [path])
    assert f'train.py: error: {path}: {words}' in line, line
