"""Checks of the figures the tools draw (shared by the figure tests): what
a reader sees, boxes that must not overlap, legends outside the data; and a
corruption grid's summary drawn at random to plot."""
import itertools

import numpy as np
from matplotlib.transforms import Bbox

from mmseg_elliptical.robustness.corruption import verdicts
from mmseg_elliptical.robustness.grid.store import ResultStore, cell_key


def drawn(fig):
    """Draw ``fig``; return its renderer."""
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def overlap(a: Bbox, b: Bbox) -> float:
    """The area two boxes share (0 when they only touch)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0) * max(h, 0)


def assert_panels_apart(fig):
    """No two panels (colour bars included) share any pixel of what they
    draw: titles, tick labels, axis labels, their own legends."""
    renderer = drawn(fig)
    boxes = [(ax, ax.get_tightbbox(renderer)) for ax in fig.axes]
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert overlap(box_a, box_b) == 0, (a.get_title(), b.get_title())


def assert_legends_outside_data(fig):
    renderer = drawn(fig)
    legends = fig.legends + [
        ax.get_legend() for ax in fig.axes if ax.get_legend()
    ]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert overlap(box, ax.get_window_extent(renderer)) == 0


def grid_summary(names, corruptions, severities, tmp_path):
    """The summary of a grid whose cells are drawn at random."""
    rng = np.random.default_rng(0)
    store = ResultStore(str(tmp_path / 'r.json'), {}, write=False)
    for k, name in enumerate(names):
        store.add_model(name, __file__, __file__)
        store.put(name, 'clean', dict(mIoU=75.0 - 4 * k))
        for c in corruptions:
            for s in severities:
                store.put(name, cell_key(c, s),
                          dict(mIoU=float(70 - 10 * s + rng.normal(0, 4))))
    return verdicts.grid_summary(store, list(names), corruptions, severities,
                                 'mIoU', names[1])
