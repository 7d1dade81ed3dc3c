"""Corrupted test pipelines: an ``ImageCorruption`` after image loading."""
from typing import Dict, List, Optional

from mmengine.config import ConfigDict

from ...transforms.image_corruption import check_corruption
from ..loaders import subset_loader_cfg

LOADERS = ('LoadImageFromFile', 'LoadImageFromNDArray')


def dataset_pipelines(dataset: Dict) -> List[List]:
    """The pipeline lists of a dataset config, looking inside wrappers.

    Returns:
        list[list]: The pipelines, the config's own objects (not copies).
    """
    if 'pipeline' in dataset:
        return [dataset['pipeline']]
    inner = [dataset['dataset']] if 'dataset' in dataset else list(
        dataset.get('datasets') or [])
    if not inner:
        raise ValueError(
            f'Cannot find the pipeline of dataset {dataset.get("type")!r}: '
            'the robustness tool needs a dataset config with `pipeline` '
            '(or a wrapper with `dataset` / `datasets`).')
    return [p for d in inner for p in dataset_pipelines(d)]


def insert_after_loading(pipeline: List, transform: Dict) -> List:
    """A copy of ``pipeline`` with ``transform`` right after image
    loading."""
    types = [str(t.get('type', '')) for t in pipeline]
    for i, name in enumerate(types):
        if name.split('.')[-1] in LOADERS:
            return [*pipeline[:i + 1], transform, *pipeline[i + 1:]]
    raise ValueError(
        f'No image loading transform ({", ".join(LOADERS)}) in the test '
        f'pipeline {types}: the corruption must follow it. Add '
        'LoadImageFromFile to the pipeline.')


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
