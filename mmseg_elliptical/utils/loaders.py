"""Dataloader configs of the analyses."""
import copy
from typing import Dict, List, Optional

from mmengine.config import ConfigDict

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
