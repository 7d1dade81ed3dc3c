"""``engine/fit.py``: a checkpoint whose weights do not fit the config's
model is refused by every tool that takes one, before any work, unless
``--allow-partial``; then the report says so. (``other_vit``: conftest.)"""
import json
import os.path as osp
import re

import pytest
import torch
from onnx_builders import onnx_graph
from processes import load_tool, refused
from saved_models import load_model

from mmseg_elliptical.deploy import missing_packages
from mmseg_elliptical.engine import check_weights_fit, weights_fit
from mmseg_elliptical.errors import CheckpointError

pytestmark = pytest.mark.usefixtures('single_thread')


def torch_verdict(model: torch.nn.Module, state: dict) -> tuple:
    """torch's own account of a non-strict load: the keys of other shapes
    (from its error), then the missing and unexpected keys of the rest."""
    with pytest.raises(RuntimeError) as error:
        model.load_state_dict(state, strict=False)
    shapes = re.findall(r'size mismatch for ([\w.]+)', str(error.value))
    rest = {k: v for k, v in state.items() if k not in shapes}
    result = model.load_state_dict(rest, strict=False)
    missing = [k for k in result.missing_keys if k not in shapes]
    return shapes, missing, result.unexpected_keys


def test_weights_fit_counts_as_torch_does(demo_models, other_vit):
    model = load_model(demo_models[:2])
    state = torch.load(other_vit, weights_only=False)['state_dict']
    state.pop('backbone.cls_token')  # one key missing too
    fit = weights_fit(model.state_dict(), state)
    shapes, missing, unexpected = torch_verdict(model, state)
    assert [k for k, _, _ in fit.mismatched] == shapes and shapes
    assert fit.missing == missing and fit.unexpected == unexpected
    assert missing == ['backbone.cls_token']
    assert unexpected and all('layers.3.' in k for k in unexpected)
    key, theirs, ours = fit.mismatched[0]
    assert theirs == tuple(state[key].shape)
    assert ours == tuple(model.state_dict()[key].shape) != theirs
    assert not fit.exact
    assert weights_fit(model.state_dict(), model.state_dict()).exact


def test_the_error_names_the_files_the_counts_and_the_fix(
        demo_models, other_vit):
    config = demo_models[0]
    assert check_weights_fit(config, demo_models[1]) is None
    with pytest.raises(CheckpointError) as error:
        check_weights_fit(config, other_vit)
    text = str(error.value)
    assert '\n' not in text
    for part in (other_vit, config, 'differ in shape (first: ',
                 'not in the model (first: backbone.layers.3.',
                 '--allow-partial'):
        assert part in text, text
    note = check_weights_fit(config, other_vit, allow_partial=True)
    assert note.startswith('Partial load (--allow-partial)')


@pytest.mark.parametrize('fault', ['missing', 'unexpected'])
def test_a_checkpoint_one_key_off_is_refused(demo_models, tmp_path, fault):
    """The demo checkpoint with exactly one key gone (or one extra), every
    other key and shape right: refused, naming that key."""
    config, good = demo_models[:2]
    checkpoint = torch.load(good, weights_only=False)
    state = checkpoint['state_dict']
    key = 'backbone.cls_token'
    if fault == 'missing':
        state.pop(key)
        words = f'1 of them are not in the checkpoint (first: {key})'
    else:
        key = 'backbone.extra'
        state[key] = torch.zeros(1)
        words = f"1 of the checkpoint's are not in the model (first: {key})"
    path = str(tmp_path / f'{fault}.pth')
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError) as error:
        check_weights_fit(config, path)
    assert words in str(error.value)
    assert 'differ in shape' not in str(error.value)


def forbidden(*args, **kwargs):
    raise AssertionError('work started before the checkpoint was checked')


#: Tool, its command line ({cfg}: the demo config, {wrong}: the other
#: ViT's checkpoint), what must not run before the check (where the tool
#: imports it from, once its arguments passed).
TOOLS = [
    ('analysis_tools/robustness.py', '{cfg} {wrong} --max-images 1',
     'engine.process_group'),
    ('analysis_tools/collapse.py', '{cfg} {wrong}', 'engine.process_group'),
    ('analysis_tools/adversarial.py', '{cfg} {wrong} --max-images 1',
     'engine.process_group'),
    ('analysis_tools/attention_maps.py', '{image} {cfg} {wrong} --point 1 1',
     'analysis.model_attention'),
    ('analysis_tools/compare_models.py',
     '{cfg} {ok} {cfg} {wrong} --names a b', 'engine.process_group'),
    ('deployment/pytorch2onnx.py', '{cfg} --checkpoint {wrong}',
     'deploy.build_segmentor'),
    pytest.param(
        'deployment/onnx_test.py',
        '{cfg} {onnx} --checkpoint {wrong}',
        'deploy.evaluate_onnx',
        marks=pytest.mark.skipif(
            bool(missing_packages()), reason='needs the deploy extra')),
]


@pytest.mark.parametrize('path, argv, guarded', TOOLS)
def test_every_tool_refuses_a_checkpoint_that_does_not_fit(
        path, argv, guarded, demo_models, other_vit, demo_root, capsys,
        monkeypatch, tmp_path):
    tool = load_tool(path)
    monkeypatch.setattr(f'mmseg_elliptical.{guarded}', forbidden)
    if path.startswith('deployment'):
        monkeypatch.setattr(tool, 'require_deploy', lambda *a: None)
    image = osp.join(demo_root, 'images', 'validation', 'demo_00000.jpg')
    onnx = onnx_graph(str(tmp_path / 'good.onnx')) if 'onnx}' in argv \
        else None
    argv = argv.format(
        cfg=demo_models[0],
        ok=demo_models[1],
        wrong=other_vit,
        image=image,
        onnx=onnx).split()
    line = refused(capsys, tool.main, argv)
    assert f'Checkpoint {other_vit} does not fit the model of ' \
        f'{demo_models[0]} (' in line, line
    assert '--allow-partial' in line


def test_a_partial_load_is_allowed_and_reported(demo_models, other_vit,
                                                tmp_path, capsys):
    tool = load_tool('analysis_tools/collapse.py')
    out = tmp_path / 'collapse'
    results = tool.main([
        demo_models[0], other_vit, '--max-images', '1', '--allow-partial',
        '--out-dir',
        str(out)
    ])
    assert results and json.loads((out / 'collapse.json').read_text())
    report = (out / 'collapse.md').read_text()
    assert 'Partial load (--allow-partial)' in report
    assert other_vit in report
    assert 'Partial load (--allow-partial)' in capsys.readouterr().out


@pytest.fixture(scope='module')
def trained_as_dot(demo_models, tmp_path_factory):
    """The elliptical demo checkpoint as a runner saves one: its ``meta``
    records the config it was trained with, here the dot-product twin's."""
    from mmengine.config import Config
    from mmengine.runner.checkpoint import save_checkpoint
    tmp = tmp_path_factory.mktemp('trained_as')
    paths = {}
    for name, config in (('dot', demo_models[2]), ('ell', demo_models[0])):
        ckpt = torch.load(demo_models[1], weights_only=False)
        ckpt['meta'] = dict(
            ckpt.get('meta', {}), cfg=Config.fromfile(config).pretty_text)
        paths[name] = str(tmp / f'trained_as_{name}.pth')
        save_checkpoint(ckpt, paths[name])
    return paths


def test_a_swapped_backbone_is_named_not_refused(demo_models, trained_as_dot):
    from mmseg_elliptical.engine import check_models_fit
    from mmseg_elliptical.utils.config import ModelSpec
    config = demo_models[0]
    swaps = []
    assert check_weights_fit(config, trained_as_dot['dot'], swaps=swaps) is \
        None
    assert swaps == [
        f'Checkpoint {trained_as_dot["dot"]} was trained with another model '
        f'than {config} (backbone VisionTransformer in training, '
        'EllipticalVisionTransformer here; from its meta): the results are '
        f'those of {config}\'s model with these weights (a test-time swap?).'
    ]
    # The same model, or no recorded config: nothing to say.
    for ckpt in (trained_as_dot['ell'], demo_models[1]):
        swaps = []
        check_weights_fit(config, ckpt, swaps=swaps)
        assert swaps == [], ckpt
    notes = check_models_fit([ModelSpec('ell', config, trained_as_dot['dot'])])
    assert len(notes) == 1 and notes[0].startswith('ell: Checkpoint ')


def test_a_tool_warns_of_a_swap_in_one_line_and_its_report(
        demo_models, trained_as_dot, tmp_path, capsys):
    tool = load_tool('analysis_tools/collapse.py')
    work = tmp_path / 'collapse'
    capsys.readouterr()
    tool.main([
        demo_models[0], trained_as_dot['dot'], '--max-images', '1',
        '--work-dir',
        str(work)
    ])
    out = capsys.readouterr()
    lines = [
        line for line in (out.out + out.err).splitlines()
        if 'was trained with another model' in line
    ]
    assert len(lines) >= 1 and 'backbone VisionTransformer in training, ' \
        'EllipticalVisionTransformer here' in lines[0]
    assert 'backbone VisionTransformer in training' in (
        work / 'collapse.md').read_text()
