"""The figures of the analysis tools read with any model names: no text runs
into another panel, legends lie outside the data, ratio and spread axes
start at 0 (checked on matplotlib's drawn layout, not by eye)."""
import numpy as np
import pytest
from figure_checks import (assert_legends_outside_data, assert_panels_apart,
                           drawn, grid_summary, overlap)

from mmseg_elliptical.analysis.evidence.attention_figures import (
    attention_figure, relevance_figure)
from mmseg_elliptical.analysis.evidence.collapse import collapse_figure
from mmseg_elliptical.robustness.corruption.cells import PROTOCOLS
from mmseg_elliptical.robustness.corruption.figure import heatmaps
from mmseg_elliptical.utils import wrap_label

#: The demo's names, and two config file names (the tools' default names).
NAMES = dict(
    demo=('elliptical', 'dot-product'),
    configs=('segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64',
             'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64'))


@pytest.mark.parametrize('names', NAMES.values(), ids=NAMES.keys())
@pytest.mark.parametrize(
    'grid', [
        (['gaussian_noise', 'defocus_blur', 'snow', 'contrast'], [1, 5]),
        (list(PROTOCOLS['ade20k-c'].corruptions), [1, 2, 3, 4, 5]),
    ],
    ids=['4x2', 'ade20k-c'])
def test_robustness_figure_reads(names, grid, tmp_path):
    corruptions, severities = grid
    summary = grid_summary(names, corruptions, severities, tmp_path)
    fig = heatmaps(summary, corruptions, severities)
    assert_panels_apart(fig)
    assert_legends_outside_data(fig)
    ce = fig.axes[len(names)]
    assert ce.get_title() == 'corruption error'
    assert ce.get_xlim()[0] == 0  # CE is a ratio
    assert max(bar.get_width() for bar in ce.patches) < ce.get_xlim()[1]


@pytest.mark.parametrize('names', NAMES.values(), ids=NAMES.keys())
def test_collapse_figure_reads(names):
    results = {
        names[0]:
        dict(
            cosine=[0.66, 0.64, 0.63, 0.62, 0.60, 0.60],
            relevance_spread=[None, 0.235, 0.247, 0.243, 0.239, 0.238],
            stage=[0] * 6),
        names[1]:
        dict(
            cosine=[0.66, 0.62, 0.60, 0.57, 0.57, 0.54],
            relevance_spread=[None] * 6,
            stage=[0] * 6)
    }
    fig = collapse_figure(results, 'backbone')
    assert_panels_apart(fig)
    assert_legends_outside_data(fig)
    spread = fig.axes[1]
    low, high = spread.get_ylim()
    assert low == 0 and high > 0.247  # a spread; no point on the frame


def attention_results(names):
    """Maps of 2 heads on an 8 x 8 grid (stride 8) in layers 1 and 3, as
    :func:`model_attention` returns them; the second model puts 0.15 of
    head 1's attention on tokens that are no grid cells."""
    rng = np.random.default_rng(0)
    results = {}
    for k, name in enumerate(names):
        layers = {
            i:
            dict(
                maps=rng.random((2, 8, 8)).astype(np.float32),
                off_grid=np.array([0.0, 0.15 * k]),
                stride=(8, 8),
                stage=0)
            for i in (1, 3)
        }
        results[name] = dict(
            layers=layers,
            box=(0, 64, 0, 64),
            input_shape=(64, 64),
            img_shape=(64, 64),
            ori_shape=(64, 64))
    return results


@pytest.mark.parametrize('names', NAMES.values(), ids=NAMES.keys())
def test_attention_figure_reads(names):
    image = np.full((64, 64, 3), 90, np.uint8)
    fig = attention_figure(image, attention_results(names), (20, 30), [1, 3],
                           [0, 1], True)
    assert_panels_apart(fig)
    renderer = drawn(fig)
    bars = [ax for ax in fig.axes if ax.get_label() == '<colorbar>']
    assert len(bars) == 1 and bars[0].get_ylim() == (0, 1)
    titles = [ax.get_title() for ax in fig.axes]
    assert 'L3 s0 h1 off 0.15' in titles
    # The caption explains the titles' parts and the scaling, under the maps.
    caption, = [t for t in fig.texts if 'own maximum' in t.get_text()]
    for part in ('L = layer', 's = ', 'h = head', 'off = '):
        assert part in caption.get_text()
    box = caption.get_window_extent(renderer)
    assert all(
        overlap(box, ax.get_tightbbox(renderer)) == 0 for ax in fig.axes)


def test_attention_figure_with_a_row_per_layer():
    """The evidence hook's layout: one model, a row per layer (the query,
    then that layer's heads and mean)."""
    image = np.full((64, 64, 3), 90, np.uint8)
    results = attention_results(['ell'])
    fig = attention_figure(
        image, results, (20, 30), [1, 3], [0, 1], True, rows='layers')
    assert_panels_apart(fig)
    maps = [ax for ax in fig.axes if ax.get_label() != '<colorbar>']
    assert len(maps) == 2 * 4
    assert [ax.get_ylabel() for ax in maps[::4]] == ['ell L1', 'ell L3']
    assert [ax.get_title() for ax in maps[4:8]
            ] == ['query', 'L3 s0 h0', 'L3 s0 h1', 'L3 s0 mean']
    width, height = fig.get_size_inches()
    assert width < 2.5 * height


@pytest.mark.parametrize('width', [4, 12, 30])
def test_wrap_label(width):
    name = NAMES['configs'][0] + '_' + 'x' * 40
    lines = wrap_label(name, width).split('\n')
    assert ''.join(lines) == name
    assert max(len(line) for line in lines) <= width
    # Lines end at a separator unless a piece is longer than a line.
    assert all(line[-1] in '_-' or len(line) == width for line in lines[:-1])
    assert wrap_label('dot-product', 30) == 'dot-product'


@pytest.mark.parametrize('names', NAMES.values(), ids=NAMES.keys())
def test_relevance_figure_reads(names):
    rng = np.random.default_rng(0)
    results = {
        name: dict(relevance={i: rng.random((2, 16))
                              for i in range(1, 6)})
        for name in names  # two elliptical models side by side
    }
    fig = relevance_figure(results, 'backbone')
    assert_panels_apart(fig)
    bars = [ax for ax in fig.axes if ax.get_label() == '<colorbar>']
    assert len(bars) == 1
    assert relevance_figure({'dot': dict(relevance={})}, 'backbone') is None
