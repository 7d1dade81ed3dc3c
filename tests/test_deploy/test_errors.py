"""What cannot be exported or run says so: the median estimator (also of the
MaskFormer / Mask2Former decoders), a size the model does not run at, a
graph fed another size than it was exported for or tested with another
config, ONNX files that cannot serve, and a missing ``[deploy]`` extra."""
import os
import os.path as osp
import subprocess
import sys

import pytest
from builders import HAS_MMDET, ROOT
from mmengine.config import Config
from onnx_builders import onnx_files
from processes import load_tool, refused
from shipped_configs import tiny_query_head

from mmseg_elliptical.deploy import (ExportError, ONNXRuntimeSegmentor,
                                     build_segmentor, check_input, export_onnx,
                                     missing_packages, ort_session,
                                     require_deploy)
from mmseg_elliptical.utils import load_config
from mmseg_elliptical.utils.files import DEPLOY_PACKAGES, installed

SEGMENTER = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_elliptical-mask_8xb1-160k_ade20k-512x512.py')
TINY = {
    'model.backbone.img_size': (32, 32),
    'model.backbone.embed_dims': 24,
    'model.backbone.num_layers': 2,
    'model.decode_head.in_channels': 24,
    'model.decode_head.channels': 24,
    'model.decode_head.embed_dims': 24,
    'model.decode_head.num_classes': 3,
}


@pytest.mark.parametrize('part', ['backbone', 'decode_head'])
def test_median_estimator_is_a_clear_error_before_export(part, tmp_path):
    cfg = load_config(SEGMENTER, {
        **TINY, f'model.{part}.relevance_reduction': 'median'
    }, True)
    segmentor = build_segmentor(cfg)
    path = tmp_path / 'median.onnx'
    with pytest.raises(ValueError) as error:
        export_onnx(segmentor, str(path), (32, 32), dynamic=True)
    message = str(error.value)
    assert f"relevance_reduction='median' (model.{part})" in message
    assert 'aten::median' in message
    assert f'--cfg-options model.{part}.relevance_reduction=mean' in message
    assert not path.exists()


def test_mean_estimator_passes_the_check(tmp_path):
    # The same model with the mean (both parts elliptical) gets past the
    # check: what is refused above is the median alone.
    from mmseg_elliptical.deploy.export import check_exportable
    segmentor = build_segmentor(load_config(SEGMENTER, TINY, True))
    check_exportable(segmentor, (32, 32))


@pytest.mark.skipif(not HAS_MMDET, reason='needs the mmdet extra')
@pytest.mark.parametrize('kind', ['mask2former', 'maskformer'])
def test_query_heads_refuse_the_median_estimator_only(kind, tmp_path):
    # MaskFormer and Mask2Former export (test_export.py); of their elliptical
    # decoder, the median estimator still refuses, before tracing.
    path = osp.join(
        ROOT, 'configs', kind,
        f'{kind}_elliptical-swin-t_elliptical-mask_8xb2-160k_ade20k-512x512.py'
    )
    from mmseg_elliptical.deploy.export import check_exportable
    for reduction in ('mean', 'median'):
        model = Config.fromfile(path).model
        model.pretrained = None
        model.backbone.embed_dims = 8
        model.backbone.num_heads = [1, 2, 4, 8]
        model.backbone.pop('init_cfg', None)
        tiny_query_head(model.decode_head, [8, 16, 32, 64], 4, 16)
        model.decode_head.relevance_reduction = reduction
        segmentor = build_segmentor(Config(dict(model=model)))
        if reduction == 'mean':
            check_exportable(segmentor, (64, 64))
            continue
        onnx = tmp_path / 'head.onnx'
        with pytest.raises(ValueError) as error:
            export_onnx(segmentor, str(onnx), (64, 64), dynamic=True)
        message = str(error.value)
        assert "relevance_reduction='median' (model.decode_head)" in message
        assert '--cfg-options model.decode_head.relevance_reduction=mean' \
            in message
        assert not onnx.exists()


SEGFORMER = osp.join(
    ROOT, 'configs', 'segformer',
    'segformer_elliptical-mit-b0_8xb2-160k_ade20k-512x512.py')
TINY_MIT = {
    'model.backbone.embed_dims': 8,
    'model.decode_head.in_channels': [8, 16, 40, 64],
    'model.decode_head.channels': 16,
}


def test_a_size_the_model_cannot_run_at_is_refused_before_the_trace(
        tmp_path, monkeypatch):
    # MiT's last stage needs more than 8x8 pixels (a kernel larger than
    # its input): one eager forward finds it, not torch.export's trace.
    monkeypatch.setattr('torch.onnx.export', forbidden)
    segmentor = build_segmentor(load_config(SEGFORMER, TINY_MIT, True))
    with pytest.raises(
            ExportError,
            match=r'does not run at 8x12 \(.*Kernel '
            r'size.*\): export at a larger --shape'):
        export_onnx(segmentor, str(tmp_path / 'm.onnx'), (8, 12), True)


def test_the_export_tool_says_so_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr('torch.onnx.export', forbidden)
    options = [f'{k}={v}'.replace(' ', '') for k, v in TINY_MIT.items()]
    line = refused(capsys,
                   load_tool('deployment/pytorch2onnx.py').main, [
                       SEGFORMER, '--shape', '8', '--output-file',
                       str(tmp_path / 'm.onnx'), '--cfg-options', *options
                   ])
    assert 'error: The model does not run at 8x8 (' in line


def forbidden(*args, **kwargs):
    raise AssertionError('the export started before the checks')


@pytest.fixture
def graphs(tmp_path):
    pytest.importorskip('onnxruntime')
    onnx_files(tmp_path)
    return tmp_path


@pytest.mark.parametrize('name, reason', [
    ('missing.onnx', 'ONNX file {path} does not exist'),
    ('.', 'ONNX file {path} is a folder'),
    ('empty.onnx', '{path} (0 bytes) is not an ONNX model: it is empty'),
    ('page.onnx', 'is not an ONNX model: it does not parse as one'),
    ('cut.onnx', 'is not an ONNX model: it does not parse as one'),
    ('apart.onnx', 'keeps its weights in apart.onnx.data, which is not '
     'beside it'),
    ('unknown.onnx', 'onnxruntime cannot load {path}: [ONNXRuntimeError]'),
])
def test_an_onnx_file_that_cannot_serve_is_named(graphs, name, reason):
    path = str(graphs / name)
    with pytest.raises(ExportError) as error:
        ort_session(path)
    assert reason.format(path=path) in str(error.value)
    ort_session(str(graphs / 'good.onnx'))


def test_a_graph_of_other_classes_than_the_config_is_refused(graphs):
    head = dict(
        type='FCNHead',
        in_channels=4,
        channels=4,
        num_convs=0,
        concat_input=False)
    path = str(graphs / 'good.onnx')
    ONNXRuntimeSegmentor(path, dict(head, num_classes=4))
    with pytest.raises(
            ExportError,
            match='good.onnx gives 4 class scores, '
            "the config's decode head 3: test the graph with the "
            'config it was exported from'):
        ONNXRuntimeSegmentor(path, dict(head, num_classes=3))


@pytest.mark.parametrize('dims, shape, match', [
    (('batch', 3, 64, 64),
     (2, 3, 48, 64), r'height 64 \(got 48\).*--dynamic-export'),
    ((1, 3, 'height', 'width'), (2, 3, 40, 40), r'batch 1 \(got 2\)'),
    ((1, 3, 64, 64), (1, 3, 64, 65), r'fixed at export: width 64 \(got 65\)')
])
def test_input_that_does_not_fit_the_graph_names_the_fix(dims, shape, match):
    with pytest.raises(ValueError, match=match):
        check_input(dims, shape)
    check_input(dims,
                [d if isinstance(d, int) else s for d, s in zip(dims, shape)])


def test_a_blocked_import_counts_as_missing(monkeypatch):
    """``sys.modules[name] = None`` (how the tests simulate a missing extra)
    makes the package missing; a package that imports is not."""
    monkeypatch.setitem(sys.modules, 'json', None)
    assert not installed('json') and installed('os')
    for name in DEPLOY_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)
        assert name in missing_packages()
    with pytest.raises(ImportError, match=r'pip install -e "\.\[deploy\]"'):
        require_deploy('ONNX export')


@pytest.mark.slow
def test_without_the_deploy_extra_the_plugin_imports_and_tools_say_why():
    # onnx, onnxruntime and onnxscript made unimportable in a fresh
    # interpreter: the plugin and its deploy package import, the export
    # tool exits with the install command, and onnxruntime inference raises
    # an ImportError naming the extra.
    code = '\n'.join([
        'import runpy, sys',
        "for name in ('onnx', 'onnxruntime', 'onnxscript'):",
        '    sys.modules[name] = None',
        'import mmseg_elliptical, mmseg_elliptical.deploy as deploy',
        'try:',
        "    deploy.ort_session('model.onnx')",
        'except ImportError as error:',
        "    print('ImportError:', error)",
        f"sys.argv = ['pytorch2onnx.py', {SEGMENTER!r}, '--shape', '32']",
        "runpy.run_path('tools/deployment/pytorch2onnx.py', "
        "run_name='__main__')",
    ])
    proc = subprocess.run([sys.executable, '-c', code],
                          cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS='1'),
                          capture_output=True,
                          text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    hint = 'install the deploy extra: pip install -e ".[deploy]"'
    assert 'ImportError: ONNX inference needs onnx, onnxscript, ' \
        'onnxruntime' in proc.stdout
    assert hint in proc.stdout
    assert 'tools/deployment/pytorch2onnx.py needs onnx' in proc.stderr
    assert hint in proc.stderr
