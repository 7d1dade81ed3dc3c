"""The evidence tools end to end on tiny random checkpoints and demo data."""
import json
import os
import os.path as osp

import numpy as np
import pytest
import torch
from conftest import DEMO_DOT, DEMO_ELLIPTICAL, load_tool, tiny_config
from mmengine.registry import init_default_scope
from mmengine.runner.checkpoint import save_checkpoint
from mmseg.registry import MODELS

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import robustness as rb
from mmseg_elliptical.datasets.demo_shapes import CLASSES, PALETTE
from mmseg_elliptical.utils.config import model_names, model_specs
from mmseg_elliptical.utils.report import markdown_table, pyplot, write_report

pytest.importorskip('imagecorruptions')

pytestmark = pytest.mark.usefixtures('single_thread')


def _tool(name: str):
    return load_tool(f'analysis_tools/{name}.py')


@pytest.fixture(scope='module')
def tiny_models(demo_root, tmp_path_factory):
    """Config and random-weight checkpoint of a tiny elliptical and dot model.

    Returns:
        list[str]: ``[config, checkpoint, config, checkpoint]``.
    """
    init_default_scope('mmseg')
    tmp = tmp_path_factory.mktemp('tiny_models')
    paths = []
    for name, path in (('ell', DEMO_ELLIPTICAL), ('dot', DEMO_DOT)):
        cfg = tiny_config(path, demo_root, str(tmp / f'wd_{name}'))
        cfg.dump(str(tmp / f'{name}.py'))
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        model.init_weights()
        save_checkpoint(
            dict(
                state_dict=model.state_dict(),
                meta=dict(
                    dataset_meta=dict(classes=CLASSES, palette=PALETTE))),
            str(tmp / f'{name}.pth'))
        paths += [str(tmp / f'{name}.py'), str(tmp / f'{name}.pth')]
    return paths


def _model(paths):
    from mmseg.apis import init_model
    return init_model(paths[0], paths[1], device='cpu')


def _val_loader(cfg_path, max_images):
    from mmengine.config import Config
    from mmengine.runner import Runner
    loader = Config.fromfile(cfg_path).val_dataloader
    loader.dataset.indices = max_images
    return Runner.build_dataloader(loader)


@torch.no_grad()
def hand_miou(paths, max_images):
    """mIoU over the first images, from predictions, by hand."""
    model = _model(paths)
    inter = np.zeros(5)
    union = np.zeros(5)
    for batch in _val_loader(paths[0], max_images):
        for sample in model.test_step(batch):
            pred = sample.pred_sem_seg.data[0].numpy()
            gt = sample.gt_sem_seg.data[0].numpy()
            for c in range(5):
                inter[c] += np.sum((pred == c) & (gt == c))
                union[c] += np.sum((pred == c) | (gt == c))
    present = union > 0
    return float(np.mean(inter[present] / union[present]) * 100)


@torch.no_grad()
def hand_cosines(paths, max_images):
    """Per layer: mean over images of the mean cosine of patch-token pairs."""
    model = _model(paths)
    layers = model.backbone.layers
    outputs = [[] for _ in layers]
    hooks = [
        layer.register_forward_hook(
            lambda m, a, out, i=i: outputs[i].append(out))
        for i, layer in enumerate(layers)
    ]
    for batch in _val_loader(paths[0], max_images):
        model.test_step(batch)
    for h in hooks:
        h.remove()
    result = []
    for outs in outputs:
        values = []
        for tokens in outs:
            for t in tokens[:, 1:]:  # patches only
                sim = torch.nn.functional.cosine_similarity(
                    t[:, None], t[None], dim=-1).double()
                i, j = torch.triu_indices(len(t), len(t), offset=1)
                values.append(sim[i, j].mean())
        result.append(torch.stack(values).mean().item())
    return result


@torch.no_grad()
def hand_attention(paths, image, layer):
    """torch's attention weights of a dot-product model's layer."""
    from mmseg.apis import inference_model
    model = _model(paths)
    attn = model.backbone.layers[layer].attn
    seen = []
    hook = attn.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    inference_model(model, image)
    hook.remove()
    x = seen[0].transpose(0, 1)  # nn.MultiheadAttention is sequence-first
    return attn.attn(x, x, x, need_weights=True, average_attn_weights=False)[1]


def test_pipeline_insertion():
    loader = dict(
        dataset=dict(
            type='X',
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations'),
                dict(type='PackSegInputs')
            ]))
    new = rb.corrupted_loader_cfg(loader, 'fog', 2, seed=1, max_images=3)
    types = [t['type'] for t in new['dataset']['pipeline']]
    assert types == [
        'LoadImageFromFile', 'ImageCorruption', 'LoadAnnotations',
        'PackSegInputs'
    ]
    assert new['dataset']['pipeline'][1]['severity'] == 2
    assert new['dataset']['indices'] == 3
    assert len(loader['dataset']['pipeline']) == 3  # input untouched
    wrapped = dict(
        dataset=dict(
            type='ConcatDataset',
            datasets=[loader['dataset'], loader['dataset']]))
    new = rb.corrupted_loader_cfg(wrapped, 'fog', 1)
    assert all(len(d['pipeline']) == 4 for d in new['dataset']['datasets'])
    with pytest.raises(ValueError, match='No image loading transform'):
        rb.corrupted_loader_cfg(
            dict(dataset=dict(pipeline=[dict(type='PackSegInputs')])), 'fog',
            1)
    with pytest.raises(ValueError, match='Unknown corruption'):
        rb.corrupted_loader_cfg(loader, 'rain', 1)


def test_model_specs_errors(tiny_models):
    with pytest.raises(ValueError, match='pairs'):
        model_specs(tiny_models[:3])
    with pytest.raises(ValueError, match='config first'):
        model_specs(tiny_models[1::-1])
    with pytest.raises(ValueError, match='does not exist'):
        model_specs([tiny_models[0], 'missing.pth'])
    specs = model_specs(tiny_models)
    assert [s.name for s in specs] == ['ell', 'dot']


def test_model_names():
    assert model_names(['a/x.py', 'b/y.py']) == ['x', 'y']
    assert model_names(['a/x.py', 'b/x.py']) == ['x#0', 'x#1']
    assert model_names(['a/x.py'], ['ell']) == ['ell']
    with pytest.raises(ValueError, match='2 names for 1'):
        model_names(['a/x.py'], ['p', 'q'])
    with pytest.raises(ValueError, match='must differ'):
        model_names(['a/x.py', 'b/y.py'], ['p', 'p'])


def test_report_writer(tmp_path):
    table = markdown_table(
        ['model', 'n', 'score'],
        [['a', 3, 1.23456], ['b', None, float('nan')]],
        spec='.2f',
        left=1)
    assert table == ('| model | n | score |\n|---|---:|---:|\n'
                     '| a | 3 | 1.23 |\n| b | - | - |\n')
    fig, ax = pyplot().subplots()
    ax.plot([0, 1])
    files = write_report(
        str(tmp_path / 'out'),
        'r',
        data={'x': [1, 2]},
        markdown=table,
        table=(['a', 'b'], [[1, None]]),
        figure=fig)
    assert [osp.basename(f)
            for f in files] == ['r.json', 'r.md', 'r.csv', 'r.png']
    assert json.loads((tmp_path / 'out' / 'r.json').read_text()) == \
        {'x': [1, 2]}
    assert (tmp_path / 'out' / 'r.md').read_text() == table
    assert (tmp_path / 'out' / 'r.csv').read_text().splitlines() == \
        ['a,b', '1,']
    assert (tmp_path / 'out' / 'r.png').read_bytes()[:4] == b'\x89PNG'
    assert write_report(str(tmp_path / 'out'), 's') == []


def test_robustness_grid_and_resume(tiny_models, tmp_path, monkeypatch):
    tool = _tool('robustness')
    argv = tiny_models + [
        '--corruptions', 'gaussian_noise', 'fog', '--severities', '1', '5',
        '--work-dir',
        str(tmp_path), '--max-images', '2'
    ]
    data = tool.main(argv)
    for name in ('ell', 'dot'):
        cells = data['models'][name]['cells']
        assert sorted(cells) == [
            'clean', 'fog/1', 'fog/5', 'gaussian_noise/1', 'gaussian_noise/5'
        ]
    # The clean cell against mIoU computed by hand from mmseg's predictions
    # on the same two images.
    for i, name in enumerate(('ell', 'dot')):
        expected = hand_miou(tiny_models[2 * i:2 * i + 2], 2)
        assert data['models'][name]['cells']['clean']['mIoU'] == \
            pytest.approx(expected, abs=0.01)
    for ext in ('json', 'md', 'csv', 'png'):
        assert osp.getsize(tmp_path / f'robustness.{ext}') > 0
    md = (tmp_path / 'robustness.md').read_text()
    assert '| model | clean mIoU | mean corrupted mIoU |' in md
    assert '| fog | 5 |' in md
    saved = json.loads((tmp_path / 'robustness.json').read_text())

    # A finished grid is not recomputed: no model is even built.
    class Forbidden:

        def __init__(self, *args, **kwargs):
            raise AssertionError('a finished cell was recomputed')

    monkeypatch.setattr(rb, 'CellEvaluator', Forbidden)
    assert tool.main(argv) == saved
    monkeypatch.undo()

    # After an interruption only the missing cell is computed.
    del saved['models']['dot']['cells']['fog/5']
    (tmp_path / 'robustness.json').write_text(json.dumps(saved))
    calls = []
    evaluate = rb.CellEvaluator.evaluate

    def counting(self, loader_cfg):
        calls.append(loader_cfg['dataset']['pipeline'][1])
        return evaluate(self, loader_cfg)

    monkeypatch.setattr(rb.CellEvaluator, 'evaluate', counting)
    data = tool.main(argv)
    assert [(c['corruption'], c['severity']) for c in calls] == [('fog', 5)]
    for cell in ('clean', 'gaussian_noise/1'):
        assert data['models']['ell']['cells'][cell] == \
            saved['models']['ell']['cells'][cell]

    with pytest.raises(SystemExit, match='settings'):
        tool.main(argv + ['--seed', '1'])
    with pytest.raises(SystemExit, match='Unknown corruption'):
        tool.main(tiny_models + ['--corruptions', 'rain'])
    stat = os.stat(tiny_models[1])
    os.utime(tiny_models[1], (stat.st_atime, stat.st_mtime - 10))
    try:  # an overwritten checkpoint invalidates its results
        with pytest.raises(SystemExit, match="results of model 'ell'"):
            tool.main(argv)
    finally:
        os.utime(tiny_models[1], (stat.st_atime, stat.st_mtime))


def test_collapse_tool(tiny_models, tmp_path):
    results = _tool('collapse').main(
        tiny_models +
        ['--out-dir', str(tmp_path), '--max-images', '2'])
    ell, dot = results['ell'], results['dot']
    assert len(ell['cosine']) == len(dot['cosine']) == 3
    assert ell['images'] == 2
    # Each layer's figure against cosines computed by hand from the layer's
    # output tokens (plain forward hooks, the full similarity matrix).
    for name, paths in (('ell', tiny_models[:2]), ('dot', tiny_models[2:])):
        expected = hand_cosines(paths, 2)
        assert results[name]['cosine'] == pytest.approx(expected, abs=1e-6)
    assert ell['relevance_spread'][0] is None
    assert all(s > 0 for s in ell['relevance_spread'][1:])
    assert dot['relevance_spread'] == [None] * 3
    for ext in ('json', 'md', 'csv', 'png'):
        assert osp.getsize(tmp_path / f'collapse.{ext}') > 0


def test_attention_maps_tool(tiny_models, demo_root, tmp_path):
    tool = _tool('attention_maps')
    image = osp.join(demo_root, 'images', 'validation', 'demo_00001.jpg')
    out = str(tmp_path / 'attention.png')
    results = tool.main([image] + tiny_models +
                        ['--point', '30', '20', '--out', out, '--mean-heads'])
    # The dot-product model's map of layer 1 is row 1 + 2 * 8 + 3 (point
    # (30, 20) on 8 x 8 patches, after the cls token) of torch's own
    # attention weights, each patch repeated over its 8 x 8 pixels.
    weights = hand_attention(tiny_models[2:], image, layer=1)
    expected = weights[0, :, 1 + 2 * 8 + 3, 1:].reshape(3, 8, 8)
    expected = expected.repeat_interleave(8, 1).repeat_interleave(8, 2)
    np.testing.assert_allclose(
        results['dot']['maps'][1], expected.numpy(), atol=1e-6)
    for name, res in results.items():
        assert sorted(res['maps']) == [1, 2]
        for i, maps in res['maps'].items():
            assert maps.shape == (3, 64, 64)
            # 8 x 8 patches: the map repeats each probability 64 times.
            total = maps.sum(axis=(1, 2)) / 64 + res['cls_mass'][i]
            assert total == pytest.approx([1, 1, 1], abs=1e-4)
    assert sorted(results['ell']['relevance']) == [1, 2]
    assert results['dot']['relevance'] == {}
    assert osp.getsize(out) > 0
    assert osp.getsize(tmp_path / 'attention_relevance.png') > 0
    with pytest.raises(SystemExit, match='outside'):
        tool.main([image] + tiny_models + ['--point', '64', '0', '--out', out])
    with pytest.raises(SystemExit, match=r'layers \[3\] out of range'):
        tool.main([image] + tiny_models +
                  ['--point', '1', '1', '--layers', '3', '--out', out])
