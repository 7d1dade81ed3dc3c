"""The export versions of mmseg's size-dependent modules and the traced size.

Each export version must compute what mmseg's / torch's module computes
(eager, against the original class), and an exported graph of it must
follow the input size (onnxruntime against the original module at sizes
other than the traced one).
"""
import pytest
import torch
import torch.nn as nn
from mmseg.models.utils import Upsample
from mmseg.models.utils.embed import AdaptivePadding

from mmseg_elliptical.deploy.shapes import (ExportAdaptiveAvgPool2d,
                                            ExportAdaptivePadding,
                                            ExportUpsample, export_friendly,
                                            trace_shape)

SIZES = [(5, 5), (7, 12), (16, 9), (1, 3), (30, 31)]


@pytest.mark.parametrize('kernel, stride, dilation', [(4, 4, 1), (7, 4, 1),
                                                      (3, 2, 2), (2, 3, 1)])
def test_export_adaptive_padding_pads_as_mmseg(kernel, stride, dilation):
    for padding in ('corner', 'same'):
        ref = AdaptivePadding(kernel, stride, dilation, padding)
        new = ExportAdaptivePadding(kernel, stride, dilation, padding)
        for size in SIZES:
            assert new.get_pad_shape(size) == ref.get_pad_shape(size), size
            x = torch.randn(1, 2, *size)
            assert torch.equal(new(x), ref(x)), size


@pytest.mark.parametrize('out', [1, 2, 3, 6, (2, 5)])
def test_export_adaptive_avg_pool_averages_as_torch(out):
    ref, new = nn.AdaptiveAvgPool2d(out), ExportAdaptiveAvgPool2d(out)
    for size in SIZES + [(6, 6)]:
        x = torch.randn(2, 3, *size, dtype=torch.float64)
        torch.testing.assert_close(new(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize('factor', [4, 2.0, 1.5])
def test_export_upsample_resizes_as_mmseg(factor):
    ref = Upsample(scale_factor=factor, mode='bilinear', align_corners=False)
    new = ExportUpsample(
        scale_factor=factor, mode='bilinear', align_corners=False)
    for size in SIZES:
        x = torch.randn(1, 2, *size)
        assert torch.equal(new(x), ref(x)), size


def test_export_friendly_swaps_for_the_export_and_restores():
    model = nn.Sequential(
        AdaptivePadding(4, 4), nn.AdaptiveAvgPool2d(2),
        Upsample(scale_factor=2), nn.Conv2d(3, 3, 1))
    with pytest.raises(RuntimeError, match='inside'):
        with export_friendly(model):
            assert [type(m) for m in model] == [
                ExportAdaptivePadding, ExportAdaptiveAvgPool2d, ExportUpsample,
                nn.Conv2d
            ]
            raise RuntimeError('inside')
    assert [type(m) for m in model
            ] == [AdaptivePadding, nn.AdaptiveAvgPool2d, Upsample, nn.Conv2d]


class Pyramid(nn.Module):
    """Patch padding, pyramid pooling and an upsampling, as in mmseg's heads
    (pooled bins resized back and added)."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = AdaptivePadding(4, 4)
        self.pool = nn.AdaptiveAvgPool2d(3)
        self.up = Upsample(scale_factor=4, mode='bilinear')

    def forward(self, x):
        x = self.pad(x)
        pooled = nn.functional.interpolate(
            self.pool(x), x.shape[2:], mode='bilinear')
        return self.up(x[..., ::4, ::4] + pooled[..., ::4, ::4])


def exported_session(model: nn.Module, example: torch.Tensor, path: str):
    """onnxruntime's session of ``model`` exported (with its export versions)
    from ``example``, with dynamic batch, height and width."""
    ort = pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    with torch.no_grad(), export_friendly(model):
        torch.onnx.export(
            model, (example, ),
            path,
            dynamo=True,
            input_names=['input'],
            dynamic_shapes=({
                0: 'batch',
                2: 'height',
                3: 'width'
            }, ),
            verbose=False)
    return ort.InferenceSession(path, providers=['CPUExecutionProvider'])


def check_follows(model: nn.Module, session, shape) -> torch.Tensor:
    """onnxruntime against ``model`` on a random batch of ``shape``; returns
    the graph's output."""
    x = torch.randn(*shape)
    with torch.no_grad():
        ref = model(x)
    out = torch.from_numpy(session.run(None, {'input': x.numpy()})[0])
    assert out.shape == ref.shape, shape
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    return out


@pytest.mark.slow
def test_exported_graph_follows_the_input_size(tmp_path):
    torch.manual_seed(0)
    model = Pyramid().eval()
    trace = trace_shape(model, (16, 16), 3)
    assert trace == (17, 17)  # 16 is a multiple of the stride: no padding
    session = exported_session(model, torch.randn(2, 3, *trace),
                               str(tmp_path / 'pyramid.onnx'))
    assert type(model.up) is Upsample
    for shape in [(2, 3, 17, 17), (1, 3, 16, 16), (3, 3, 30, 23)]:
        check_follows(model, session, shape)


@pytest.mark.slow
def test_exported_fractional_upsample_follows_the_size(tmp_path):
    # int(size * 1.5) of a symbolic size would be the traced 25 at any size.
    model = nn.Sequential(
        Upsample(scale_factor=1.5, mode='bilinear', align_corners=False))
    session = exported_session(model, torch.randn(2, 2, 17, 17),
                               str(tmp_path / 'upsample.onnx'))
    for shape, out_size in [((2, 2, 17, 17), (25, 25)),
                            ((1, 2, 24, 30), (36, 45)),
                            ((3, 2, 9, 13), (13, 19))]:
        assert check_follows(model, session, shape).shape[2:] == out_size
