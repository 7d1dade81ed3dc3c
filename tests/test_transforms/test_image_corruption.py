"""``transforms/image_corruption.py``: ImageCorruption: every corruption
runs, deterministic, keeps the image."""
import numpy as np
import pytest
from mmseg.registry import TRANSFORMS

import mmseg_elliptical  # noqa: F401
from mmseg_elliptical.transforms import (CORRUPTIONS, ImageCorruption,
                                         corrupt_image)

pytest.importorskip('imagecorruptions')


def _image(h: int = 32, w: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = np.zeros((h, w, 3), np.uint8)
    img[:] = (40, 120, 200)
    img[h // 4:3 * h // 4, w // 4:3 * w // 4] = (220, 30, 90)
    return np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)


def test_names_match_library():
    import imagecorruptions
    assert CORRUPTIONS == tuple(imagecorruptions.get_corruption_names('all'))


@pytest.mark.parametrize('name', CORRUPTIONS)
def test_every_corruption_runs(name):
    img = _image()
    for severity in (1, 5):
        out = corrupt_image(img, name, severity, seed=3)
        assert out.shape == img.shape and out.dtype == np.uint8
        assert not np.array_equal(out, img), (name, severity)
        again = corrupt_image(img, name, severity, seed=3)
        np.testing.assert_array_equal(out, again)


def test_transform_registered_deterministic_and_keeps_global_rng():
    t = TRANSFORMS.build(
        dict(type='ImageCorruption', corruption='gaussian_noise', severity=3))
    assert isinstance(t, ImageCorruption)
    img = _image(40, 48)
    np.random.seed(123)
    expected_next = np.random.rand()
    np.random.seed(123)
    out1 = t(dict(img=img.copy(), img_path='a.jpg'))['img']
    assert np.random.rand() == expected_next  # global state restored
    out2 = t(dict(img=img.copy(), img_path='a.jpg'))['img']
    other = t(dict(img=img.copy(), img_path='b.jpg'))['img']
    assert out1.shape == img.shape and out1.dtype == np.uint8
    assert not np.array_equal(out1, img)
    np.testing.assert_array_equal(out1, out2)
    assert not np.array_equal(out1, other)  # seeded per image
    reseeded = ImageCorruption(
        'gaussian_noise', 3, seed=1)(dict(img=img.copy(),
                                          img_path='a.jpg'))['img']
    assert not np.array_equal(out1, reseeded)


def test_bgr_rgb_order_and_gray():
    img = _image()
    bgr = corrupt_image(img, 'saturate', 2, seed=0, channel_order='bgr')
    rgb = corrupt_image(
        img[..., ::-1], 'saturate', 2, seed=0, channel_order='rgb')
    np.testing.assert_array_equal(bgr, rgb[..., ::-1])
    gray = img[..., 0].copy()
    out = corrupt_image(gray, 'contrast', 3, seed=0)
    assert out.shape == gray.shape and out.dtype == np.uint8
    flt = corrupt_image(img.astype(np.float32), 'contrast', 3, seed=0)
    assert flt.dtype == np.float32 and flt.shape == img.shape


@pytest.mark.parametrize('kwargs, match', [
    (dict(corruption='rain',
          severity=1), 'Unknown corruption.*gaussian_noise'),
    (dict(corruption='fog', severity=0), 'Unknown severity.*1, 2, 3, 4, 5'),
    (dict(corruption='fog', severity=6), 'Unknown severity'),
    (dict(corruption='fog', severity=True), 'Unknown severity'),
    (dict(corruption='fog', severity=1, channel_order='hsv'), 'channel_order'),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImageCorruption(**kwargs)


def test_small_image_raises():
    with pytest.raises(ValueError, match='at least 32'):
        corrupt_image(np.zeros((16, 16, 3), np.uint8), 'fog', 1, seed=0)


def test_missing_library_message(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == 'imagecorruptions':
            raise ImportError('no module')
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, '__import__', fake_import)
    with pytest.raises(ImportError, match=r'pip install -e \.\[robustness\]'):
        ImageCorruption('fog', 1)
