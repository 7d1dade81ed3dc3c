"""Builders of the tests: paths, the one table of tiny models, the demo
configs, models, segmentors and samples.

Every test that needs a tiny model of a family takes it from
:data:`TINY_MODELS` (the deploy tests' shrunk shipped configs aside:
``tests/test_deploy/test_export.py``). The shipped configs shrunk are
:mod:`shipped_configs`' job, the benchmark's variants :mod:`bench_builders`',
ONNX files :mod:`onnx_builders`', saved models on the demo data
:mod:`saved_models`'; shared checks :mod:`checks`', spies :mod:`spies`',
processes :mod:`processes`'. ``pytest.ini`` puts this folder
on ``sys.path``, so any test imports these modules whatever its depth.
"""
import copy
import importlib.util
import os.path as osp
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.config import Config
from torch import Tensor

from mmseg_elliptical.models import (EllipticalBEiT, EllipticalMAE,
                                     EllipticalMaskTransformerHead,
                                     EllipticalMixVisionTransformer,
                                     EllipticalPCPVT,
                                     EllipticalSwinTransformer,
                                     EllipticalVisionTransformer)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO = osp.join(ROOT, 'configs', 'demo')
DEMO_ELLIPTICAL = osp.join(
    DEMO, 'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
DEMO_DOT = osp.join(DEMO,
                    'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
# The MaskFormer / Mask2Former configs' heads subclass mmdet's (the extra).
HAS_MMDET = importlib.util.find_spec('mmdet') is not None
MMDET_CONFIG_DIRS = ('mask2former', 'maskformer')
TINY_GENERATE = dict(num_train=8, num_val=4, img_size=64, seed=0)

# ------------------------------------------------------ the tiny models


@dataclass(frozen=True)
class TinyModel:
    """A tiny model of one family.

    Attributes:
        cls (type): The plugin's class.
        args (dict): Its arguments.
        shape (tuple): The input of the model's own tests (the head's: one
            feature map).
        channels (int): Channels of the last feature map (the analysis'
            ``FCNHead`` reads it).
        stages (list[int]): By hand, the stage of each transformer layer.
        strides (list[tuple]): By hand, input pixels per token of each stage.
        grids (list[tuple]): By hand, the token grid of each stage on a
            64 x 64 scene, or on a ``crop``.
        crop (tuple, optional): BEiT and MAE: the ``(h, w)`` of their
            ``img_size``, the crops of mmseg's sliding-window inference on
            the 64 x 64 scenes.
    """
    cls: type
    args: dict
    shape: Tuple[int, ...]
    channels: int = 0
    stages: List[int] = field(default_factory=list)
    strides: List[Tuple[int, int]] = field(default_factory=list)
    grids: List[Tuple[int, int]] = field(default_factory=list)
    crop: Optional[Tuple[int, int]] = None
    no_dropout: dict = field(default_factory=dict)


# BEiT / MAE on 32 x 24 images: a 4 x 3 patch grid (a cls token and 12
# patches), four layers.
BEIT_ARCH = dict(
    img_size=(32, 24),
    patch_size=8,
    embed_dims=24,
    num_heads=3,
    num_layers=4,
    mlp_ratio=2,
    out_indices=(1, 3))
_BEIT = dict(
    shape=(2, 3, 32, 24),
    channels=24,
    stages=[0, 0, 0, 0],
    strides=[(8, 8)],
    grids=[(4, 3)],
    crop=(32, 24),
    no_dropout=dict(drop_path_rate=0.))

#: Every family at a tiny size: the models' own tests build them at
#: ``shape`` (``tiny_family``), the analysis tests into whole segmentors on
#: the demo data (``saved_models.family_config``); the head is the
#: Segmenter one.
TINY_MODELS: Dict[str, TinyModel] = dict(
    # A 4-layer ViT made for 32 x 32 images (4 x 4 patches of 8), 3 heads of
    # 8; on the 64 x 64 scenes its position embedding is resized.
    vit=TinyModel(
        EllipticalVisionTransformer,
        dict(
            img_size=32,
            patch_size=8,
            embed_dims=24,
            num_heads=3,
            num_layers=4,
            mlp_ratio=2),
        shape=(2, 3, 32, 32),
        channels=24,
        stages=[0, 0, 0, 0],
        strides=[(8, 8)],
        grids=[(8, 8)]),
    # MiT: stage 1 reduces its 16 x 16 tokens to 5 x 5 keys (sr_ratio 3
    # does not divide 16: the last row and column of tokens are no key's).
    mit=TinyModel(
        EllipticalMixVisionTransformer,
        dict(
            embed_dims=8,
            num_stages=2,
            num_layers=[1, 2],
            num_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            sr_ratios=[3, 1],
            out_indices=(0, 1),
            mlp_ratio=2),
        shape=(2, 3, 32, 32),
        channels=16,
        stages=[0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    pcpvt=TinyModel(
        EllipticalPCPVT,
        dict(
            embed_dims=[8, 16],
            patch_sizes=[4, 2],
            strides=[4, 2],
            num_heads=[1, 2],
            mlp_ratios=[2, 2],
            depths=[2, 2],
            sr_ratios=[2, 1],
            out_indices=(0, 1)),
        shape=(2, 3, 32, 32),
        channels=16,
        stages=[0, 0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    # Swin: 3 x 3 windows; a 16 x 16 grid is padded to 18 x 18.
    swin=TinyModel(
        EllipticalSwinTransformer,
        dict(
            pretrain_img_size=64,
            embed_dims=8,
            depths=(2, 2),
            num_heads=(1, 2),
            window_size=3,
            mlp_ratio=2,
            strides=(4, 2),
            out_indices=(0, 1),
            drop_path_rate=0.),
        shape=(2, 3, 24, 24),
        channels=16,
        stages=[0, 0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    beit=TinyModel(EllipticalBEiT, BEIT_ARCH, **_BEIT),
    # MAE: BEiT's layout and sizes (its qkv bias and absolute position
    # embedding change neither).
    mae=TinyModel(EllipticalMAE, BEIT_ARCH, **_BEIT),
    head=TinyModel(
        EllipticalMaskTransformerHead,
        dict(
            in_channels=24,
            channels=24,
            num_classes=5,
            num_layers=2,
            num_heads=3,
            embed_dims=24),
        shape=(2, 24, 4, 4),
        no_dropout=dict(drop_path_rate=0., dropout_ratio=0.)),
)
#: The backbones of :data:`TINY_MODELS` (what the analysis reads).
BACKBONES = tuple(n for n, m in TINY_MODELS.items() if m.stages)
VIT_ARCH = TINY_MODELS['vit'].args


def tiny_family(name: str, device='cpu', dropout: bool = True, **kwargs):
    """A model of :data:`TINY_MODELS` built from seed 0, initialised, with
    :func:`randomise`'s weights, on ``device``; and a random input for it (a
    list of one feature map for the head).

    Args:
        name (str): The family.
        device: Where model and input go. Defaults to the CPU.
        dropout (bool): False: without any dropout (``no_dropout``).
        **kwargs: Overrides of the family's arguments.

    Returns:
        tuple: The model (in train mode) and its input.
    """
    tiny = TINY_MODELS[name]
    args = dict(tiny.args, **({} if dropout else tiny.no_dropout))
    torch.manual_seed(0)
    model = tiny.cls(**dict(args, **kwargs))
    model.init_weights()
    randomise(model)
    x = torch.randn(*tiny.shape, generator=torch.Generator().manual_seed(1))
    model, x = model.to(device), x.to(device)
    return model.train(), [x] if name == 'head' else x


# ------------------------------------------------------ the demo configs


def demo_data_options(demo_root: str) -> list:
    """``--cfg-options`` that point every dataloader at the tiny demo data
    in ``demo_root`` (generated there with :data:`TINY_GENERATE`)."""
    opts = []
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        opts.append(f'{loader}.dataset.data_root={demo_root}')
        opts += [
            f'{loader}.dataset.generate.{k}={v}'
            for k, v in TINY_GENERATE.items()
        ]
    return opts


def demo_config(path: str, demo_root: str, work_dir: str) -> Config:
    """A demo config shrunk to a 3-layer, 48-dim, 3-head ViT + Segmenter,
    every dataloader on the tiny demo data."""
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
    }
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options[f'{loader}.dataset.data_root'] = demo_root
        options[f'{loader}.dataset.generate'] = TINY_GENERATE
    cfg.merge_from_dict(options)
    return cfg


def tiny_config(path: str, demo_root: str, work_dir: str,
                **overrides) -> Config:
    """:func:`demo_config` with a 4-iteration schedule (batch 2, validation
    and checkpoint every 2, a log line every iteration).

    Args:
        path (str): Demo config file.
        demo_root (str): Generated data root.
        work_dir (str): Runner work dir.
        **overrides: Extra ``--cfg-options``-style keys.
    """
    cfg = demo_config(path, demo_root, work_dir)
    cfg.merge_from_dict({
        'train_dataloader.batch_size': 2,
        'train_cfg.max_iters': 4,
        'train_cfg.val_interval': 2,
        'default_hooks.checkpoint.interval': 2,
        'default_hooks.logger.interval': 1,
        **overrides
    })
    return cfg


# --------------------------------------------------------- samples, models


def seg_samples(n: int,
                h: int,
                w: int,
                num_classes: Optional[int],
                generator: Optional[torch.Generator] = None,
                heights: Optional[Sequence[int]] = None) -> List:
    """``n`` ``SegDataSample`` s of a padded ``h x w`` batch, with random
    ground truth of ``h x w``.

    Args:
        n (int): Number of samples.
        h, w (int): Label map size, also the padded and batch input shapes
            of the meta information (``pad_shape``, ``batch_input_shape``).
        num_classes (int, optional): Labels are drawn from
            ``0 .. num_classes - 1``; None: no ground truth.
        generator (torch.Generator, optional): Defaults to one seeded 1.
        heights (Sequence[int], optional): Each image's height in the
            batch (the rows below it are padding): its ``img_shape`` and
            ``ori_shape`` are ``(heights[i], w)``. Defaults to ``h``.
    """
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    if generator is None:
        generator = torch.Generator().manual_seed(1)
    samples = []
    for i in range(n):
        sample = SegDataSample()
        if num_classes is not None:
            sample.gt_sem_seg = PixelData(
                data=torch.randint(
                    0, num_classes, (1, h, w), generator=generator))
        shape = (h if heights is None else heights[i], w)
        sample.set_metainfo(
            dict(
                img_shape=shape,
                ori_shape=shape,
                pad_shape=(h, w),
                batch_input_shape=(h, w)))
        samples.append(sample)
    return samples


def total_loss(model: torch.nn.Module, x: Tensor, samples: List) -> Tensor:
    """Sum of a segmentor's training losses (``mode='loss'``)."""
    losses = model(x, samples, mode='loss')
    return sum(v for k, v in losses.items() if 'loss' in k)


def build_module(cfg: dict, seed: int = 0) -> torch.nn.Module:
    """``MODELS.build`` of a copy of ``cfg`` in mmseg's scope from ``seed``,
    initialised (``init_weights``)."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(seed)
    module = MODELS.build(copy.deepcopy(cfg))
    module.init_weights()
    return module


def build_segmentor(path: str = DEMO_ELLIPTICAL,
                    **overrides) -> torch.nn.Module:
    """The tiny demo segmentor of ``path`` (see :func:`tiny_config`),
    initialised from seed 0, in train mode.

    Args:
        path (str): Demo config. Defaults to the elliptical one.
        **overrides: ``--cfg-options``-style keys (``model.backbone.x``).
    """
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    cfg = tiny_config(path, 'unused', 'unused', **overrides)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.train()


# The tiny demo segmentor without any dropout and with the elliptical head
# The tiny demo segmentor without any dropout and with the elliptical head
# (deterministic training steps: DDP, checkpoints).
SEGMENTOR_NO_DROPOUT = {
    'model.backbone.drop_path_rate': 0.0,
    'model.backbone.drop_rate': 0.0,
    'model.backbone.attn_drop_rate': 0.0,
    'model.decode_head.type': 'EllipticalMaskTransformerHead',
    'model.decode_head.drop_path_rate': 0.0,
    'model.decode_head.dropout_ratio': 0.0,
}


def images(seed: int, size: int = 32, batch: int = 2) -> Tensor:
    """A seeded batch of random images ``[batch, 3, size, size]``."""
    return torch.randn(
        batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def randomise(model) -> None:
    """Relative position tables, q / v biases and qkv weights that matter
    (the default initialisation makes every attention almost uniform)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            table = 'relative_position_bias_table' in name
            if table or name.endswith(('q_bias', 'v_bias')):
                p.normal_()
            elif 'qkv.weight' in name:
                p.normal_(std=0.3)


def zero_values(model) -> None:
    """Zero the qkv projections (and BEiT's q / v biases): v = 0 in every
    layer, so ``m`` has no evidence anywhere."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'qkv' in name or name.endswith(('q_bias', 'v_bias')):
                p.zero_()


def set_fused(model, fused: bool) -> None:
    """``fused_attn`` of every elliptical attention of ``model``."""
    from mmseg_elliptical.models import EllipticalAttentionMixin
    for module in model.modules():
        if isinstance(module, EllipticalAttentionMixin):
            module.fused_attn = fused


def tiny_fcn_head(family: str) -> dict:
    """mmseg's ``FCNHead`` (5 classes, 8 channels) on the last feature map
    of the tiny ``family`` backbone."""
    return dict(
        type='FCNHead',
        in_channels=TINY_MODELS[family].channels,
        in_index=-1,
        channels=8,
        num_convs=1,
        concat_input=False,
        num_classes=5,
        loss_decode=dict(type='CrossEntropyLoss'))
