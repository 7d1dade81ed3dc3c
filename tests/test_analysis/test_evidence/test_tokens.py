"""From pixels to tokens and from attention rows back, on known points."""
import numpy as np
import pytest
import torch
from evidence_oracles import window_slot
from mmengine.config import ConfigDict
from mmseg.models.backbones.swin import ShiftWindowMSA
from mmseg.models.segmentors import EncoderDecoder

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.analysis import (attention_row, grid_to_image,
                                       input_point, query_token, slide_boxes)
from mmseg_elliptical.analysis.evidence.attention_maps import crop_of
from mmseg_elliptical.models import to_elliptical
from mmseg_elliptical.models.transformer import TokenLayout


def test_input_point_and_query_token_known_points():
    # 100 x 80 image resized to 64 x 51, 8 x 8 patches, 8 x 7 grid.
    xy = input_point((40, 30), (100, 80), (64, 51))
    assert xy == (25, 19)  # x 40 * 51 / 80 = 25.5, y 30 * 64 / 100 = 19.2
    whole = (0, 64, 0, 51)
    assert query_token(xy, whole, (8, 8), (8, 7)) == (2, 3)
    assert query_token((0, 0), whole, (8, 8), (8, 7)) == (0, 0)
    last = input_point((79, 99), (100, 80), (64, 51))
    assert query_token(last, whole, (8, 8), (8, 7)) == (7, 6)
    # Rows of 4 pixels, columns of 16.
    assert query_token(xy, whole, (4, 16), (16, 4)) == (4, 1)
    # In a crop whose top left is input pixel (x 16, y 8).
    assert query_token(xy, (8, 40, 16, 48), (4, 4), (8, 8)) == (2, 2)
    with pytest.raises(ValueError, match=r'\(80, 10\) lies outside the 80 x'):
        input_point((80, 10), (100, 80), (64, 51))
    with pytest.raises(ValueError, match='outside the crop'):
        query_token(xy, (20, 52, 0, 32), (4, 4), (8, 8))


def test_slide_boxes_are_mmseg_crops():
    h, w = 64, 100
    boxes = slide_boxes((h, w), (32, 32), (32, 32))
    assert boxes[:4] == [(0, 32, 0, 32), (0, 32, 32, 64), (0, 32, 64, 96),
                         (0, 32, 68, 100)]
    assert len(boxes) == 8
    # mmseg's own slide inference on an image whose pixels hold their
    # index: each crop's first pixel tells where it starts.
    seen = []

    class Recording(EncoderDecoder):

        def __init__(self):
            torch.nn.Module.__init__(self)
            self.test_cfg = ConfigDict(crop_size=(32, 32), stride=(32, 32))
            self.out_channels = 1

        def encode_decode(self, crop, metas):
            seen.append((int(crop[0, 0, 0, 0]), crop.shape[-2:]))
            return crop[:, :1]

    image = torch.arange(h * w, dtype=torch.float64).view(1, 1, h, w)
    Recording().slide_inference(image, [dict(img_shape=(h, w))])
    assert [(box[0] * w + box[2], (box[1] - box[0], box[3] - box[2]))
            for box in boxes] == [(v, tuple(s)) for v, s in seen]
    # The crop of a query pixel: the first one that holds it.
    slide = dict(mode='slide', crop_size=(32, 32), stride=(32, 32))
    assert crop_of(slide, (h, w), (70, 40)) == (32, 64, 64, 96)
    assert crop_of(dict(mode='whole'), (h, w), (70, 40)) == (0, 64, 0, 100)


def coded_probs(*shape):
    """Probabilities whose every entry tells its index."""
    return torch.arange(np.prod(shape), dtype=torch.float64).view(*shape)


def swin_attention(shift):
    attn = ShiftWindowMSA(
        embed_dims=4, num_heads=2, window_size=3, shift_size=shift)
    return to_elliptical(attn)


@pytest.mark.parametrize(
    'shift, query, members',
    [
        # Window 3, shift 1, a 5 x 6 grid padded to 6 x 6 and rolled by -1:
        # token (0, 0) lands at (5, 5), slot 8 of window (1, 1); that window
        # holds rolled rows and columns 3..5, i.e. rows 4, 5, 0 (5 is
        # padding) and columns 4, 5, 0.
        (1, (0, 0), [(4, 4), (4, 5), (4, 0), (0, 4), (0, 5), (0, 0)]),
        # No shift: token (4, 5) is slot 5 of window (1, 1), with rows 3, 4
        # and columns 3, 4, 5.
        (0, (4, 5), [(3, 3), (3, 4), (3, 5), (4, 3), (4, 4), (4, 5)]),
    ])
def test_window_keys_known_points(shift, query, members):
    grid, ws = (5, 6), 3
    attn = swin_attention(shift)
    layout = TokenLayout(grid='argument', stride=(4, 4), keys='windows')

    def window_and_slot(r, c):  # padded to 6 x 6
        return window_slot(r, c, 6, ws, shift)

    probs = coded_probs(2 * 4, 2, 9, 9)  # 2 images x 4 windows, 2 heads
    maps, off = attention_row(probs, layout, grid, query, attn, image=1)
    window, position = window_and_slot(*query)
    expected = np.zeros((2, *grid))
    for r, c in members:
        w, slot = window_and_slot(r, c)
        assert w == window
        expected[:, r, c] = probs[4 + window, :, position, slot].numpy()
    np.testing.assert_array_equal(maps, expected)
    # Real probabilities: the mass outside the grid is on padding tokens.
    soft = probs.softmax(-1)
    maps, off = attention_row(soft, layout, grid, query, attn, image=1)
    np.testing.assert_allclose(maps.sum((1, 2)) + off, 1, atol=1e-6)
    assert (off > 0).all() == (len(members) < 9)


def test_reduced_keys_known_points():
    # A 7 x 9 grid reduced by 2: 3 x 4 keys, each over 2 x 2 tokens; the
    # last row and column of tokens are under no key.
    layout = TokenLayout(
        grid='argument', stride=(4, 4), keys='reduced', reduction=2)
    probs = coded_probs(1, 2, 63, 12)
    maps, off = attention_row(probs, layout, (7, 9), (5, 8))
    row = probs[0, :, 5 * 9 + 8].numpy()
    assert maps.shape == (2, 7, 9)
    assert maps[1, 0, 0] == maps[1, 1, 1] == row[1, 0]
    assert maps[0, 2, 7] == row[0, 1 * 4 + 3]
    assert maps[0, 5, 4] == maps[0, 4, 5] == row[0, 2 * 4 + 2]
    assert (maps[:, 6] == 0).all() and (maps[:, :, 8] == 0).all()
    assert (off == 0).all()
    with pytest.raises(ValueError, match='12 keys are not the 4 x 4 grid'):
        attention_row(probs, layout, (8, 9), (0, 0))


def test_global_keys_with_cls_and_class_tokens():
    # 1 cls token, a 2 x 3 grid, 2 class embeddings.
    layout = TokenLayout(grid='backbone', prefix=1, suffix=2)
    probs = torch.randn(1, 2, 9, 9).softmax(-1)
    maps, off = attention_row(probs, layout, (2, 3), (1, 2))
    np.testing.assert_allclose(maps, probs[0, :, 6, 1:7].view(2, 2, 3))
    np.testing.assert_allclose(
        off, (probs[0, :, 6, 0] + probs[0, :, 6, 7:].sum(-1)).numpy(),
        rtol=1e-5)


def test_grid_to_image_known_points():
    maps = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    # Tokens of 4 x 4 pixels in a crop at input x 4..16, y 0..8 of a
    # 8 x 16 input whose image is 8 x 14 (2 columns of padding), resized
    # from a 16 x 28 original.
    out = grid_to_image(maps, (4, 4), (0, 8, 4, 16), (8, 16), (8, 14),
                        (16, 28))
    assert out.shape == (1, 16, 28)
    assert (out[0, :, :8] == 0).all()  # left of the crop
    assert out[0, 0, 8] == 0 and out[0, 15, 27] == 5  # first and last
    assert out[0, 8, 16] == 3 + 1  # input (y 4, x 8): token (1, 1)
