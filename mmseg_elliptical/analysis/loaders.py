"""Dataloader configs of the analyses."""
import copy
from typing import Dict, Optional

from mmengine.config import ConfigDict


def subset_loader_cfg(loader_cfg: Dict,
                      max_images: Optional[int] = None,
                      shuffle: Optional[bool] = None) -> ConfigDict:
    """A copy of a dataloader config, cut to its first images.

    Args:
        loader_cfg (dict): A ``*_dataloader`` config (not modified).
        max_images (int, optional): Keep only the first ``max_images``
            images (the dataset's ``indices``); None keeps all.
        shuffle (bool, optional): Set the sampler's ``shuffle``.

    Returns:
        ConfigDict: The new dataloader config.
    """
    cfg = ConfigDict(copy.deepcopy(loader_cfg))
    if max_images is not None:
        if max_images < 1:
            raise ValueError(f'max_images={max_images} must be >= 1.')
        cfg['dataset']['indices'] = max_images
    if shuffle is not None:
        cfg['sampler'] = dict(type='DefaultSampler', shuffle=shuffle)
    return cfg
