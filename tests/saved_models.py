"""Saved tiny models on the demo data, as the analysis tools load them: whole
configs around a tiny backbone of :data:`builders.TINY_MODELS`, random-weight
checkpoints, the test images, and the hand computations over them (mIoU,
collapse) that the tools' results are checked against.
"""
import os.path as osp
from typing import List

import numpy as np
import torch
import torch.nn as nn
from builders import DEMO_DOT, TINY_MODELS, demo_config, tiny_fcn_head
from evidence_oracles import pairwise_cosine
from mmengine.config import Config
from mmseg.models.backbones import VisionTransformer

from mmseg_elliptical.models.transformer import EllipticalTransformerMixin


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
    and MAE run mmseg's sliding-window inference in crops of their
    ``img_size`` (32 x 24) of the 64 x 64 scenes.
    """
    tiny = TINY_MODELS[family]
    cfg = demo_config(DEMO_DOT, demo_root, work_dir)
    backbone = dict(tiny.args, type=tiny.cls.__name__)
    if not elliptical:
        backbone['elliptical_layers'] = []
    cfg.model = dict(
        type='EncoderDecoder',
        data_preprocessor=cfg.model.data_preprocessor,
        backbone=backbone,
        decode_head=tiny_fcn_head(family),
        test_cfg=dict(mode='whole') if tiny.crop is None else dict(
            mode='slide', crop_size=tiny.crop, stride=tiny.crop))
    return cfg


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
