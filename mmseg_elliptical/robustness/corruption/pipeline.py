"""Corrupted test pipelines: an ``ImageCorruption`` after image loading."""
from typing import Dict, Optional

from mmengine.config import ConfigDict

from ...transforms.image_corruption import check_corruption
from ...utils.loaders import (dataset_pipelines, insert_after_loading,
                              subset_loader_cfg)


def corrupted_loader_cfg(loader_cfg: Dict,
                         corruption: Optional[str] = None,
                         severity: Optional[int] = None,
                         seed: int = 0,
                         max_images: Optional[int] = None) -> ConfigDict:
    """A test dataloader config whose images are corrupted.

    Args:
        loader_cfg (dict): The config's ``test_dataloader`` (not modified).
        corruption (str, optional): Corruption name; None for clean images.
        severity (int, optional): Severity 1-5.
        seed (int): Seed of :class:`ImageCorruption`.
        max_images (int, optional): Evaluate only the first images.
    """
    cfg = subset_loader_cfg(loader_cfg, max_images)
    if corruption is not None:
        check_corruption(corruption, severity)
        transform = dict(
            type='ImageCorruption',
            corruption=corruption,
            severity=severity,
            seed=seed)
        for pipeline in dataset_pipelines(cfg['dataset']):
            pipeline[:] = insert_after_loading(pipeline, transform)
    return cfg
