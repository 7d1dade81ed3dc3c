"""``analysis/loaders.py``: ``subset_loader_cfg`` cuts a dataloader config to
its first images (and sets the sampler's shuffle) without touching the
original."""
import copy

import pytest
from builders import DEMO_ELLIPTICAL, TINY_GENERATE, tiny_config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from mmseg_elliptical.utils.loaders import subset_loader_cfg


@pytest.fixture
def loader_cfg(demo_root, tmp_path):
    return tiny_config(DEMO_ELLIPTICAL, demo_root,
                       str(tmp_path)).val_dataloader.to_dict()


def paths(cfg):
    init_default_scope('mmseg')
    loader = Runner.build_dataloader(cfg)
    return [
        loader.dataset.get_data_info(i)['img_path']
        for i in range(len(loader.dataset))
    ]


@pytest.mark.parametrize('max_images', [1, 3])
def test_first_images(loader_cfg, max_images):
    original = copy.deepcopy(loader_cfg)
    cut = subset_loader_cfg(loader_cfg, max_images)
    assert loader_cfg == original  # not modified
    everything = paths(loader_cfg)
    assert len(everything) == TINY_GENERATE['num_val']
    assert paths(cut) == everything[:max_images]
    cut['dataset']['pipeline'].clear()  # a deep copy
    assert loader_cfg == original


def test_all_images_and_sampler(loader_cfg):
    assert subset_loader_cfg(loader_cfg) == loader_cfg
    for shuffle in (True, False):
        cut = subset_loader_cfg(loader_cfg, shuffle=shuffle)
        assert cut['sampler'] == dict(type='DefaultSampler', shuffle=shuffle)
        assert cut['dataset'] == loader_cfg['dataset']


@pytest.mark.parametrize('max_images', [0, -2])
def test_bad_max_images(loader_cfg, max_images):
    with pytest.raises(ValueError, match=f'max_images={max_images} must be'):
        subset_loader_cfg(loader_cfg, max_images)
