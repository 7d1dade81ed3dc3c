"""onnxruntime in mmseg's test loop, and the two deployment tools.

One tiny demo model (random weights, saved as a checkpoint) is exported once
by ``tools/deployment/pytorch2onnx.py --dynamic-export --verify``; its graph
then runs whole and slide inference in :class:`ONNXRuntimeSegmentor` against
the PyTorch model's ``predict`` on the demo's test pipeline, and
``tools/deployment/onnx_test.py`` gives the PyTorch test's metrics. The same
graph is a wrong graph of the model with other decode-head weights: ``verify``
must report the mismatch, and the export tool must exit above
``--tolerance``.
"""
import copy
import os.path as osp

import pytest
import torch
from builders import DEMO_ELLIPTICAL
from mmengine.config import ConfigDict
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmseg.registry import MODELS
from processes import load_tool

from mmseg_elliptical.datasets import generate_demo_shapes
from mmseg_elliptical.deploy import (ONNXRuntimeSegmentor, build_segmentor,
                                     onnx_model_cfg, ort_session,
                                     verification_shapes, verify)
from mmseg_elliptical.utils import load_config

pytest.importorskip('onnxruntime')
pytestmark = pytest.mark.slow  # every test runs the exported graph

GENERATE = dict(num_train=2, num_val=6, img_size=64, seed=0)
SLIDE = {
    'model.test_cfg.mode': 'slide',
    'model.test_cfg.crop_size': (48, 48),
    'model.test_cfg.stride': (32, 32),
}


def options(root: str) -> dict:
    """A 2-layer, 24-channel demo model on ``root``'s scenes, batches of
    2 in the test loader."""
    opts = {
        'model.backbone.num_layers': 2,
        'model.backbone.embed_dims': 24,
        'model.backbone.num_heads': 3,
        'model.decode_head.in_channels': 24,
        'model.decode_head.channels': 24,
        'model.decode_head.embed_dims': 24,
        'model.decode_head.num_heads': 3,
        'model.decode_head.num_layers': 1,
        'test_dataloader.batch_size': 2,
        'test_dataloader.dataset.data_root': root,
    }
    opts.update({
        f'test_dataloader.dataset.generate.{k}': v
        for k, v in GENERATE.items()
    })
    return opts


def as_args(opts: dict) -> list:
    return ['--cfg-options'
            ] + [f'{k}={v}'.replace(' ', '') for k, v in opts.items()]


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """(options, checkpoint, graph, the export tool's report)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp('deploy')
    root = str(tmp / 'demo_shapes')
    generate_demo_shapes(root, **GENERATE)
    opts = options(root)
    # Seeded before the build (the initial weights too), so that the model
    # does not depend on the tests run before; weights far enough from the
    # initialisation that 3-4 classes get an IoU above 0, whole and slide.
    torch.manual_seed(0)
    segmentor = build_segmentor(load_config(DEMO_ELLIPTICAL, opts, True))
    with torch.no_grad():
        for p in segmentor.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    checkpoint = str(tmp / 'random.pth')
    torch.save(dict(state_dict=segmentor.state_dict(), meta={}), checkpoint)
    graph = str(tmp / 'demo.onnx')
    report = load_tool('deployment/pytorch2onnx.py').main([
        DEMO_ELLIPTICAL, '--checkpoint', checkpoint, '--output-file', graph,
        '--shape', '48', '48', '--dynamic-export', '--verify', *as_args(opts)
    ])
    yield opts, checkpoint, graph, report
    torch.set_num_threads(threads)


def test_export_tool_writes_a_verified_dynamic_graph(exported):
    _, _, graph, report = exported
    assert osp.isfile(graph)
    assert report['export'].trace_shape == (49, 49)  # 48 needs no padding
    assert [p.shape for p in report['parity']] == [(1, 3, 48, 48),
                                                   (2, 3, 39, 53)]
    for parity in report['parity']:
        assert parity.max_rel < 1e-4, parity


def moved_checkpoint(checkpoint: str, path: str) -> str:
    """``checkpoint`` with its decode head's weights moved: the fixture's
    graph is a wrong graph of this model."""
    state = torch.load(checkpoint, weights_only=False)['state_dict']
    torch.manual_seed(1)
    for key, value in state.items():
        if key.startswith('decode_head.') and value.is_floating_point():
            value.add_(torch.randn_like(value) * 0.5)
    torch.save(dict(state_dict=state, meta={}), path)
    return path


def test_verify_reports_the_mismatch_of_a_wrong_graph(exported, tmp_path):
    opts, checkpoint, graph, _ = exported
    cfg = load_config(DEMO_ELLIPTICAL, opts, True)
    session = ort_session(graph, 1)
    shapes = verification_shapes((48, 48), dynamic=True)
    for ckpt, wrong in [(checkpoint, False),
                        (moved_checkpoint(checkpoint,
                                          str(tmp_path / 'moved.pth')), True)]:
        segmentor = build_segmentor(cfg, ckpt)
        parity = verify(segmentor, session, shapes)
        assert [p.shape for p in parity] == [(1, 3, 48, 48), (2, 3, 39, 53)]
        # verify's batches (standard normal from seed 0), compared here with
        # predict and onnxruntime directly
        generator = torch.Generator().manual_seed(0)
        for p, (b, h, w) in zip(parity, shapes):
            x = torch.randn(b, 3, h, w, generator=generator)
            with torch.no_grad():
                ref = torch.stack(
                    [s.seg_logits.data for s in segmentor.predict(x)])
            out = torch.from_numpy(session.run(None, {'input': x.numpy()})[0])
            diff = float((out - ref).abs().max())
            assert p.max_abs == pytest.approx(diff, rel=1e-5, abs=1e-9)
            assert p.max_rel == pytest.approx(
                diff / float(ref.abs().max()), rel=1e-5, abs=1e-9)
            assert (p.max_rel > 0.05) if wrong else (p.max_rel < 1e-4), p


def test_export_tool_exits_above_the_tolerance(exported, tmp_path,
                                               monkeypatch):
    # The tool verifies the graph it exported; here the export is the
    # fixture's graph, whose weights differ from the checkpoint's.
    opts, checkpoint, graph, report = exported
    tool = load_tool('deployment/pytorch2onnx.py')
    monkeypatch.setattr('mmseg_elliptical.deploy.export_onnx',
                        lambda *args, **kwargs: report['export'])
    moved = moved_checkpoint(checkpoint, str(tmp_path / 'moved.pth'))
    args = [
        DEMO_ELLIPTICAL, '--checkpoint', moved, '--output-file', graph,
        '--shape', '48', '48', '--dynamic-export', '--verify'
    ]
    with pytest.raises(SystemExit) as error:
        tool.main(args + as_args(opts))
    # a message as exit code: the process exits with status 1
    assert isinstance(error.value.code, str)
    assert error.value.code.startswith(
        'Verification failed: relative difference')
    assert error.value.code.endswith('>= --tolerance 0.001.')
    # the same graph passes a tolerance above its difference
    loose = tool.main(args + ['--tolerance', '1e3'] + as_args(opts))
    assert 0.05 < max(p.max_rel for p in loose['parity']) < 1e3


def batches(cfg, segmentor, n: int = 2):
    """The first ``n`` test batches through ``segmentor``'s preprocessor."""
    with DefaultScope.overwrite_default_scope('mmseg'):
        loader = Runner.build_dataloader(cfg.test_dataloader)
    out = []
    for i, data in enumerate(loader):
        if i == n:
            break
        out.append(segmentor.data_preprocessor(data, False))
    return out


@pytest.mark.parametrize('slide', [False, True])
def test_inference_matches_predict_on_the_test_pipeline(exported, slide):
    opts, checkpoint, graph, _ = exported
    cfg = load_config(DEMO_ELLIPTICAL, {
        **opts,
        **(SLIDE if slide else {})
    }, True)
    torch_model = build_segmentor(cfg, checkpoint)
    with DefaultScope.overwrite_default_scope('mmseg'):
        onnx_model = MODELS.build(ConfigDict(onnx_model_cfg(cfg.model, graph)))
    assert isinstance(onnx_model, ONNXRuntimeSegmentor)
    assert onnx_model.test_cfg.mode == ('slide' if slide else 'whole')
    for data in batches(cfg, torch_model):
        # Each predict gets its own copy of the batch: mmseg's predict writes
        # into the data samples it is given and returns them.
        with torch.no_grad():
            ref = torch_model.predict(**copy.deepcopy(data))
        out = onnx_model.predict(**copy.deepcopy(data))
        assert len(out) == len(ref) == 2
        for a, b in zip(out, ref):
            assert a is not b
            logits, expected = a.seg_logits.data, b.seg_logits.data
            assert logits.shape == expected.shape == (5, 64, 64)
            err = (logits - expected).abs().max() / expected.abs().max()
            assert err < 1e-4
            same = a.pred_sem_seg.data == b.pred_sem_seg.data
            assert same.float().mean() > 0.999


def test_slide_inference_runs_the_graph_on_each_crop(exported):
    # 64x64 scenes, 48x48 crops at stride 32: 2x2 crops per batch.
    opts, checkpoint, graph, _ = exported
    cfg = load_config(DEMO_ELLIPTICAL, {**opts, **SLIDE}, True)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(ConfigDict(onnx_model_cfg(cfg.model, graph)))
    seen = []
    run = model.encode_decode
    model.encode_decode = lambda x, metas: seen.append(x.shape) or run(
        x, metas)
    model.predict(**batches(cfg, build_segmentor(cfg), 1)[0])
    assert seen == [(2, 3, 48, 48)] * 4


@pytest.mark.parametrize('slide', [False, True])
def test_onnx_test_tool_gives_the_pytorch_test_metrics(exported, slide,
                                                       tmp_path):
    opts, checkpoint, graph, _ = exported
    metrics = load_tool('deployment/onnx_test.py').main([
        DEMO_ELLIPTICAL, graph, '--checkpoint', checkpoint, '--work-dir',
        str(tmp_path), *as_args({
            **opts,
            **(SLIDE if slide else {})
        })
    ])
    onnx, pytorch = metrics['onnxruntime'], metrics['pytorch']
    assert onnx.keys() == pytorch.keys() and 'mIoU' in onnx
    assert sum(k.startswith('IoU.') for k in onnx) == 5
    for key in onnx:
        assert abs(onnx[key] - pytorch[key]) <= 0.01, key
    # The random model predicts several classes right somewhere (the
    # metrics move with the predictions).
    assert sum(onnx[k] > 0 for k in onnx if k.startswith('IoU.')) >= 3
