"""Common image corruptions (Hendrycks & Dietterich) as an mmseg transform,
deterministic per image (needs the ``[robustness]`` extra)."""
import hashlib
from typing import Dict, Optional

import cv2
import numpy as np
from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

from ..utils.choices import CORRUPTIONS, SEVERITIES

# Corruptions that draw from their own generator unless given a seed.
_SEEDED = ('glass_blur', 'impulse_noise')
_MIN_SIDE = 32


def import_imagecorruptions():
    """Import the optional ``imagecorruptions`` package (an ``ImportError``
    naming the extra when missing)."""
    try:
        import imagecorruptions
    except ImportError as e:
        raise ImportError(
            'ImageCorruption needs the optional `imagecorruptions` package: '
            'install the robustness extra with `pip install -e .[robustness]` '
            '(or `pip install imagecorruptions-imaug>=1.1.5`).') from e
    return imagecorruptions


def check_corruption(corruption: str, severity: int) -> None:
    """Raise a ``ValueError`` naming the valid choices if either is
    unknown."""
    if corruption not in CORRUPTIONS:
        raise ValueError(f'Unknown corruption {corruption!r}; valid are '
                         f'{", ".join(CORRUPTIONS)}.')
    if isinstance(severity, bool) or severity not in SEVERITIES:
        raise ValueError(f'Unknown severity {severity!r}; valid are the '
                         f'integers {", ".join(map(str, SEVERITIES))}.')


def corruption_seed(seed: int, key: str, corruption: str,
                    severity: int) -> int:
    """A 32-bit seed from the run seed, the image key (its path) and the
    corruption, stable across processes and platforms."""
    text = f'{seed}|{key}|{corruption}|{severity}'.encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], 'little')


def corrupt_image(img: np.ndarray,
                  corruption: str,
                  severity: int,
                  seed: int,
                  channel_order: str = 'bgr') -> np.ndarray:
    """Corrupt one image deterministically, keeping its shape and dtype.

    Args:
        img (np.ndarray): ``H x W``, ``H x W x 1`` or ``H x W x 3``, values in
            [0, 255]; H and W at least 32.
        corruption (str): One of :data:`CORRUPTIONS`.
        severity (int): One of :data:`SEVERITIES`.
        seed (int): Seed of every random draw; numpy's global state is
            restored afterwards.
        channel_order (str): ``'bgr'`` or ``'rgb'``.
    """
    check_corruption(corruption, severity)
    if channel_order not in ('bgr', 'rgb'):
        raise ValueError(f'channel_order={channel_order!r} must be "bgr" or '
                         '"rgb".')
    if img.ndim not in (2, 3) or (img.ndim == 3
                                  and img.shape[2] not in (1, 3)):
        raise ValueError(f'ImageCorruption needs an H x W, H x W x 1 or '
                         f'H x W x 3 image, got shape {img.shape}.')
    if min(img.shape[:2]) < _MIN_SIDE:
        raise ValueError(f'imagecorruptions needs images of at least '
                         f'{_MIN_SIDE} x {_MIN_SIDE} pixels, got '
                         f'{img.shape[:2]}: insert ImageCorruption after a '
                         'Resize to a larger size.')
    lib = import_imagecorruptions()
    rgb = np.clip(np.rint(img), 0, 255).astype(np.uint8) \
        if img.dtype != np.uint8 else img
    if rgb.ndim == 2 or rgb.shape[2] == 1:
        rgb = np.repeat(rgb.reshape(rgb.shape[:2] + (1, )), 3, axis=2)
    elif channel_order == 'bgr':
        rgb = rgb[..., ::-1]
    rgb = np.ascontiguousarray(rgb)
    kwargs = dict(seed=seed) if corruption in _SEEDED else {}
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        out = lib.corrupt(
            rgb, severity=severity, corruption_name=corruption, **kwargs)
    finally:
        np.random.set_state(state)
    if out.shape[:2] != rgb.shape[:2]:  # guard against library shape bugs
        out = cv2.resize(out, (rgb.shape[1], rgb.shape[0]))
    if img.ndim == 2 or img.shape[2] == 1:
        gray = np.rint(
            out.astype(np.float32) @ np.array([0.299, 0.587, 0.114],
                                              np.float32))
        out = np.clip(gray, 0, 255).reshape(img.shape)
    elif channel_order == 'bgr':
        out = out[..., ::-1]
    return np.ascontiguousarray(out).astype(img.dtype)


@TRANSFORMS.register_module()
class ImageCorruption(BaseTransform):
    """Apply one ``imagecorruptions`` corruption to ``results['img']``
    (insert it right after ``LoadImageFromFile``); the result depends only on
    ``seed``, ``img_path`` (else the content), corruption and severity.

    Args:
        corruption (str): One of :data:`CORRUPTIONS`.
        severity (int): 1 (mild) to 5 (strong).
        seed (int): Run-level seed.
        channel_order (str): Of ``results['img']``: ``'bgr'`` or ``'rgb'``.
    """

    def __init__(self,
                 corruption: str,
                 severity: int,
                 seed: int = 0,
                 channel_order: str = 'bgr') -> None:
        check_corruption(corruption, severity)
        if channel_order not in ('bgr', 'rgb'):
            raise ValueError(f'channel_order={channel_order!r} must be "bgr" '
                             'or "rgb".')
        import_imagecorruptions()  # fail at build time, not mid-evaluation
        self.corruption = corruption
        self.severity = severity
        self.seed = seed
        self.channel_order = channel_order

    def _key(self, results: Dict) -> str:
        path: Optional[str] = results.get('img_path')
        if path is not None:
            return str(path)
        return hashlib.sha256(np.ascontiguousarray(
            results['img']).tobytes()).hexdigest()

    def transform(self, results: Dict) -> Dict:
        """Corrupt ``results['img']`` in place of the original."""
        if 'img' not in results:
            raise KeyError('ImageCorruption needs results["img"]: put it '
                           'after LoadImageFromFile in the pipeline.')
        seed = corruption_seed(self.seed, self._key(results), self.corruption,
                               self.severity)
        results['img'] = corrupt_image(results['img'], self.corruption,
                                       self.severity, seed, self.channel_order)
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(corruption={self.corruption!r}, '
                f'severity={self.severity}, seed={self.seed}, '
                f'channel_order={self.channel_order!r})')
