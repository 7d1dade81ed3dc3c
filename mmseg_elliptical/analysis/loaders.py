"""Dataloader configs of the analyses."""
import copy
from typing import Dict, Optional

from mmengine.config import ConfigDict


def subset_loader_cfg(loader_cfg: Dict,
                      max_images: Optional[int] = None,
                      shuffle: Optional[bool] = None) -> ConfigDict:
    """A copy of a ``*_dataloader`` config cut to its first ``max_images``
    images (None: all), with the sampler's ``shuffle`` set if given."""
    cfg = ConfigDict(copy.deepcopy(loader_cfg))
    if max_images is not None:
        if max_images < 1:
            raise ValueError(f'max_images={max_images} must be >= 1.')
        cfg['dataset']['indices'] = max_images
    if shuffle is not None:
        cfg['sampler'] = dict(type='DefaultSampler', shuffle=shuffle)
    return cfg
