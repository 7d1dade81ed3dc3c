"""Shared fixtures: the demo configs shrunk to test size, demo data in tmp."""
import os.path as osp

import pytest
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO = osp.join(ROOT, 'configs', 'demo')
DEMO_ELLIPTICAL = osp.join(
    DEMO,
    'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
DEMO_DOT = osp.join(
    DEMO, 'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
TINY_GENERATE = dict(num_train=8, num_val=4, img_size=64, seed=0)


@pytest.fixture(scope='session')
def demo_root(tmp_path_factory) -> str:
    """A small demo dataset generated once per session."""
    from mmseg_elliptical.datasets import generate_demo_shapes
    root = str(tmp_path_factory.mktemp('data') / 'demo_shapes')
    generate_demo_shapes(root, **TINY_GENERATE)
    return root


def tiny_config(path: str, demo_root: str, work_dir: str, **overrides) -> Config:
    """A demo config with a 3-layer, 48-dim, 3-head model on the tiny dataset.

    Args:
        path (str): Demo config file.
        demo_root (str): Generated data root.
        work_dir (str): Runner work dir.
        **overrides: Extra ``--cfg-options``-style keys.
    """
    cfg = Config.fromfile(path)
    options = {
        'work_dir': work_dir,
        'model.backbone.num_layers': 3,
        'model.backbone.embed_dims': 48,
        'model.backbone.num_heads': 3,
        'model.decode_head.num_heads': 3,
        'model.decode_head.in_channels': 48,
        'model.decode_head.channels': 48,
        'model.decode_head.embed_dims': 48,
        'train_dataloader.batch_size': 2,
        'train_cfg.max_iters': 4,
        'train_cfg.val_interval': 2,
        'default_hooks.checkpoint.interval': 2,
        'default_hooks.logger.interval': 1,
    }
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options[f'{loader}.dataset.data_root'] = demo_root
        options[f'{loader}.dataset.generate'] = TINY_GENERATE
    options.update(overrides)
    cfg.merge_from_dict(options)
    return cfg


@pytest.fixture(scope='module')
def single_thread():
    """Run a module's tests with one torch thread, then restore the count.

    On a shared 2-core machine two OpenMP threads spin-wait on each other
    whenever another process holds a core: the tiny test models then run up
    to 100x slower than with one thread. Subprocesses get
    ``OMP_NUM_THREADS=1`` from the tests that start them.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
