"""Tiny models of every family, their configs and checkpoints, and the
independent computations the analysis tests compare with."""
import importlib.util
import numpy as np
import os.path as osp
import torch
import torch.nn as nn
from mmengine.config import Config
from mmseg.models.backbones import VisionTransformer
from typing import Dict, List

from mmseg_elliptical.models.transformer import EllipticalTransformerMixin

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(ROOT, 'configs', 'demo')
DEMO_ELLIPTICAL = osp.join(
    DEMO, 'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
DEMO_DOT = osp.join(DEMO,
                    'segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
#: The demo data of the root conftest's ``demo_root`` (64 x 64 scenes).
TINY_GENERATE = dict(num_train=8, num_val=4, img_size=64, seed=0)

#: One tiny backbone per family: its config and, by hand, the number of
#: layers, the stage of each and the stride and grid of each stage on a
#: 64 x 64 input (BEiT and MAE: 32 x 32 crops of their img_size).
FAMILIES: Dict[str, Dict] = dict(
    vit=dict(
        backbone=dict(
            type='EllipticalVisionTransformer',
            img_size=(64, 64),
            patch_size=8,
            embed_dims=16,
            num_layers=3,
            num_heads=2,
            mlp_ratio=2,
            out_indices=(2, ),
            final_norm=True),
        channels=16,
        stages=[0, 0, 0],
        strides=[(8, 8)],
        grids=[(8, 8)]),
    mit=dict(
        backbone=dict(
            type='EllipticalMixVisionTransformer',
            embed_dims=8,
            num_stages=2,
            num_layers=[1, 2],
            num_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            sr_ratios=[3, 1],
            out_indices=(0, 1),
            mlp_ratio=2),
        channels=16,
        stages=[0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    pcpvt=dict(
        backbone=dict(
            type='EllipticalPCPVT',
            embed_dims=[8, 16],
            patch_sizes=[4, 2],
            strides=[4, 2],
            num_heads=[1, 2],
            mlp_ratios=[2, 2],
            depths=[2, 2],
            sr_ratios=[2, 1],
            out_indices=(0, 1)),
        channels=16,
        stages=[0, 0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    swin=dict(
        backbone=dict(
            type='EllipticalSwinTransformer',
            pretrain_img_size=64,
            embed_dims=8,
            depths=(2, 2),
            num_heads=(1, 2),
            window_size=3,
            mlp_ratio=2,
            strides=(4, 2),
            out_indices=(0, 1),
            drop_path_rate=0.),
        channels=16,
        stages=[0, 0, 1, 1],
        strides=[(4, 4), (8, 8)],
        grids=[(16, 16), (8, 8)]),
    beit=dict(
        backbone=dict(
            type='EllipticalBEiT',
            img_size=(32, 32),
            patch_size=8,
            embed_dims=16,
            num_layers=3,
            num_heads=2,
            mlp_ratio=2,
            out_indices=(2, )),
        channels=16,
        stages=[0, 0, 0],
        strides=[(8, 8)],
        grids=[(4, 4)],
        crop=32),
    mae=dict(
        backbone=dict(
            type='EllipticalMAE',
            img_size=(32, 32),
            patch_size=8,
            embed_dims=16,
            num_layers=3,
            num_heads=2,
            mlp_ratio=2,
            out_indices=(2, )),
        channels=16,
        stages=[0, 0, 0],
        strides=[(8, 8)],
        grids=[(4, 4)],
        crop=32),
)


class QueryDecoder(EllipticalTransformerMixin, VisionTransformer):
    """A part that declares only its stages (as a Mask2Former decoder does
    with its queries): the default layout, tokens that are no image grid.
    """

    def layer_stages(self):
        return [self.layers[:2], self.layers[2:]]

    @classmethod
    def holding(cls) -> nn.Module:
        """A module whose ``backbone`` is a small one (4 layers, 2 stages,
        elliptical layers 1 and 3)."""
        torch.manual_seed(0)
        holder = nn.Module()
        holder.backbone = cls(
            img_size=16,
            patch_size=4,
            embed_dims=8,
            num_layers=4,
            num_heads=2,
            elliptical_layers=[1, 3])
        return holder


def family_config(family: str,
                  demo_root: str,
                  work_dir: str,
                  elliptical: bool = True) -> Config:
    """A whole config (model, demo test data) around a tiny backbone.

    The decode head is mmseg's ``FCNHead`` on the last feature map; BEiT
    and MAE run mmseg's sliding-window inference in 32 x 32 crops (their
    ``img_size``) of the 64 x 64 scenes.
    """
    spec = FAMILIES[family]
    cfg = Config.fromfile(DEMO_DOT)
    backbone = dict(spec['backbone'])
    if not elliptical:
        backbone['elliptical_layers'] = []
    cfg.model = dict(
        type='EncoderDecoder',
        data_preprocessor=cfg.model.data_preprocessor,
        backbone=backbone,
        decode_head=dict(
            type='FCNHead',
            in_channels=spec['channels'],
            in_index=-1,
            channels=8,
            num_convs=1,
            concat_input=False,
            num_classes=5,
            loss_decode=dict(type='CrossEntropyLoss')),
        test_cfg=dict(mode='whole') if 'crop' not in spec else dict(
            mode='slide',
            crop_size=(spec['crop'], spec['crop']),
            stride=(spec['crop'], spec['crop'])))
    point_to_data(cfg, demo_root, work_dir)
    return cfg


def demo_config(path: str, demo_root: str, work_dir: str) -> Config:
    """A demo config shrunk to a 3-layer, 48-dim, 3-head ViT + Segmenter."""
    cfg = Config.fromfile(path)
    cfg.merge_from_dict({
        'model.backbone.num_layers': 3,
        'model.backbone.embed_dims': 48,
        'model.backbone.num_heads': 3,
        'model.decode_head.num_heads': 3,
        'model.decode_head.in_channels': 48,
        'model.decode_head.channels': 48,
        'model.decode_head.embed_dims': 48,
    })
    point_to_data(cfg, demo_root, work_dir)
    return cfg


def point_to_data(cfg: Config, demo_root: str, work_dir: str) -> None:
    """Point every dataloader at the tiny demo data."""
    options = {'work_dir': work_dir}
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        options[f'{loader}.dataset.data_root'] = demo_root
        options[f'{loader}.dataset.generate'] = TINY_GENERATE
    cfg.merge_from_dict(options)


def save_model(cfg: Config, path: str, seed: int = 0) -> List[str]:
    """Dump ``cfg`` to ``path`` and a random-weight checkpoint beside it.

    Returns:
        list[str]: ``[config, checkpoint]``.
    """
    from mmengine.registry import init_default_scope
    from mmengine.runner.checkpoint import save_checkpoint
    from mmseg.registry import MODELS

    from mmseg_elliptical.datasets.demo_shapes import CLASSES, PALETTE
    init_default_scope('mmseg')
    cfg.dump(path)
    torch.manual_seed(seed)
    model = MODELS.build(cfg.model)
    model.init_weights()
    checkpoint = osp.splitext(path)[0] + '.pth'
    save_checkpoint(
        dict(
            state_dict=model.state_dict(),
            meta=dict(dataset_meta=dict(classes=CLASSES, palette=PALETTE))),
        checkpoint)
    return [path, checkpoint]


def load_model(paths: List[str]):
    """The segmentor of ``[config, checkpoint]``, as the tools load it."""
    from mmseg.apis import init_model
    return init_model(paths[0], paths[1], device='cpu')


def first_images(config: str, max_images: int):
    """The config's test dataloader over its first images."""
    from mmengine.runner import Runner
    loader = Config.fromfile(config).test_dataloader
    loader.dataset.indices = max_images
    return Runner.build_dataloader(loader)


def pairwise_cosine(tokens: torch.Tensor) -> torch.Tensor:
    """``[B]`` mean of ``cos(x_i, x_j)`` over ``i < j`` from the full
    ``N x N`` similarity matrix."""
    x = tokens.double()
    sim = torch.nn.functional.cosine_similarity(
        x[:, :, None], x[:, None], dim=-1)
    i, j = torch.triu_indices(x.shape[1], x.shape[1], offset=1)
    return sim[:, i, j].mean(-1)


@torch.no_grad()
def hand_collapse(paths: List[str], pick, tokens: slice, images: int) -> tuple:
    """Mean over forwards of the full-matrix pairwise cosine of one
    backbone layer's output grid tokens.

    Args:
        paths (list[str]): ``[config, checkpoint]``.
        pick (callable): The layer, given the backbone.
        tokens (slice): The grid tokens of its output.
        images (int): Over the first test images.

    Returns:
        tuple: The mean, the number of forwards and of grid tokens.
    """
    model = load_model(paths)
    seen = []
    hook = pick(model.backbone).register_forward_hook(
        lambda m, args, out: seen.append(out[:, tokens]))
    for batch in first_images(paths[0], images):
        model.test_step(batch)
    hook.remove()
    values = torch.cat([pairwise_cosine(t) for t in seen])
    return values.mean().item(), len(seen), seen[0].shape[1]


def naive_relevance(v: torch.Tensor, v_prev: torch.Tensor) -> torch.Tensor:
    """The paper's ``m``: per image and head, ``mean_n |v - v_prev|`` over
    the max, as a loop over images and heads."""
    B, H, _, d = v.shape
    m = torch.empty(B, H, 1, d, dtype=v.dtype)
    for b in range(B):
        for h in range(H):
            diff = (v[b, h] - v_prev[b, h]).abs().mean(0)
            m[b, h, 0] = diff / diff.max()
    return m


@torch.no_grad()
def hand_miou(paths: List[str], max_images: int, classes: int = 5) -> float:
    """mIoU over the first test images, from mmseg's predictions, by hand."""
    model = load_model(paths)
    inter, union = np.zeros(classes), np.zeros(classes)
    for batch in first_images(paths[0], max_images):
        for sample in model.test_step(batch):
            pred = sample.pred_sem_seg.data[0].numpy()
            gt = sample.gt_sem_seg.data[0].numpy()
            for c in range(classes):
                inter[c] += np.sum((pred == c) & (gt == c))
                union[c] += np.sum((pred == c) | (gt == c))
    present = union > 0
    return float(np.mean(inter[present] / union[present]) * 100)


def window_slot(row: int, col: int, padded: int, window: int,
                shift: int) -> tuple:
    """Swin's window (row-major among ``padded // window`` per side) and
    position of grid token ``(row, col)`` of a square grid padded to
    ``padded`` and rolled by ``-shift``, by hand."""
    r, c = (row - shift) % padded, (col - shift) % padded
    per_side = padded // window
    return ((r // window) * per_side + c // window,
            (r % window) * window + c % window)


def load_tool(name: str):
    """The module of ``tools/analysis_tools/<name>.py``."""
    path = osp.join(ROOT, 'tools', 'analysis_tools', f'{name}.py')
    spec = importlib.util.spec_from_file_location(f'tool_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
