"""Helpers shared by the tests: paths, tiny configs and models, random
samples, spies, tool loaders and the checks several families run.

Independent re-computations of the method live in :mod:`oracles`; fixtures
in ``conftest.py``. ``pytest.ini`` puts this folder on ``sys.path``, so any
test imports ``helpers`` whatever its depth.
"""
import copy
import glob
import importlib.util
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.config import Config, ConfigDict
from mmseg.models.backbones import VisionTransformer
from oracles import pairwise_cosine
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mmseg_elliptical.models import (EllipticalBEiT, EllipticalMAE,
                                     EllipticalMaskTransformerHead,
                                     EllipticalMixVisionTransformer,
                                     EllipticalPCPVT,
                                     EllipticalSwinTransformer,
                                     EllipticalVisionTransformer)
from mmseg_elliptical.models.transformer import EllipticalTransformerMixin

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
# A 4-layer ViT on 32 x 32 images (4 x 4 patches of 8), 3 heads of 8.
VIT_ARCH = dict(
    img_size=32,
    patch_size=8,
    embed_dims=24,
    num_heads=3,
    num_layers=4,
    mlp_ratio=2)
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

# Every family at a tiny size: name -> (class, arguments, input shape); the
# head's input is one feature map.
TINY_FAMILIES = {
    'vit': (EllipticalVisionTransformer, VIT_ARCH, (2, 3, 32, 32)),
    'mit': (EllipticalMixVisionTransformer,
            dict(
                embed_dims=8,
                num_stages=2,
                num_heads=[1, 2],
                num_layers=[2, 2],
                patch_sizes=[7, 3],
                strides=[4, 2],
                sr_ratios=[2, 1],
                out_indices=(0, 1)), (2, 3, 32, 32)),
    'pcpvt': (EllipticalPCPVT,
              dict(
                  embed_dims=[8, 16],
                  num_heads=[1, 2],
                  depths=[2, 2],
                  sr_ratios=[2, 1],
                  mlp_ratios=[2, 2],
                  out_indices=(0, 1)), (2, 3, 32, 32)),
    'swin': (EllipticalSwinTransformer,
             dict(
                 embed_dims=16,
                 depths=(2, 2),
                 num_heads=(2, 2),
                 strides=(4, 2),
                 out_indices=(0, 1),
                 window_size=3), (2, 3, 24, 24)),
    'beit': (EllipticalBEiT, BEIT_ARCH, (2, 3, 32, 24)),
    'mae': (EllipticalMAE, BEIT_ARCH, (2, 3, 32, 24)),
    'head': (EllipticalMaskTransformerHead,
             dict(
                 in_channels=24,
                 channels=24,
                 num_classes=5,
                 num_layers=2,
                 num_heads=3,
                 embed_dims=24), (2, 24, 4, 4)),
}

# What each family needs set so that it has no dropout (the defaults of
# Swin, BEiT, MAE and the Segmenter head drop paths or features).
NO_DROPOUT = {
    'swin': dict(drop_path_rate=0.),
    'beit': dict(drop_path_rate=0.),
    'mae': dict(drop_path_rate=0.),
    'head': dict(drop_path_rate=0., dropout_ratio=0.),
}


def tiny_family(name: str, device='cpu', dropout: bool = True, **kwargs):
    """A family of :data:`TINY_FAMILIES` built from seed 0, initialised, with
    :func:`randomise`'s weights, on ``device``; and a random input for it (a
    list of one feature map for the head).

    Args:
        name (str): The family.
        device: Where model and input go. Defaults to the CPU.
        dropout (bool): False: without any dropout (:data:`NO_DROPOUT`).
        **kwargs: Overrides of the family's arguments.

    Returns:
        tuple: The model (in train mode) and its input.
    """
    cls, arch, shape = TINY_FAMILIES[name]
    args = dict(arch, **({} if dropout else NO_DROPOUT.get(name, {})))
    torch.manual_seed(0)
    model = cls(**dict(args, **kwargs))
    model.init_weights()
    randomise(model)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    model, x = model.to(device), x.to(device)
    return model.train(), [x] if name == 'head' else x


def as_list(outs) -> list:
    """A model's outputs as a list of tensors (a head returns one)."""
    return [outs] if isinstance(outs, Tensor) else tree_flatten(outs)[0]


# ---------------------------------------------------------------- configs


def tiny_config(path: str, demo_root: str, work_dir: str,
                **overrides) -> Config:
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


def config_paths(*dirs: str) -> List[str]:
    """The shipped configs of ``configs/<dir>/`` for each of ``dirs``,
    sorted."""
    return sorted(
        p for d in dirs
        for p in glob.glob(osp.join(ROOT, 'configs', d, '*.py')))


def sync_bn_to_bn(cfg):
    """SyncBN -> BN everywhere in a (nested) config, in place; returns it."""
    if isinstance(cfg, dict):
        if cfg.get('type') == 'SyncBN':
            cfg['type'] = 'BN'
        for v in cfg.values():
            sync_bn_to_bn(v)
    elif isinstance(cfg, (list, tuple)):
        for v in cfg:
            sync_bn_to_bn(v)
    return cfg


def mmseg_names() -> Dict[str, str]:
    """Elliptical class name -> the name of the mmseg class it converts."""
    from mmseg_elliptical.models.conversion import ELLIPTICAL_VERSIONS
    return {
        cls.__name__: src.__name__
        for src, cls in ELLIPTICAL_VERSIONS.items()
    }


def mmseg_base(path: str) -> str:
    """The ``mmseg::`` config a shipped config inherits (maybe through one of
    ours)."""
    import ast
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    bases = next(
        ast.literal_eval(node.value) for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == '_base_')
    bases = [bases] if isinstance(bases, str) else bases
    assert len(bases) == 1, (path, bases)
    if bases[0].startswith('mmseg::'):
        return bases[0]
    return mmseg_base(osp.join(osp.dirname(path), bases[0]))


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


def tiny_query_head(head: ConfigDict,
                    in_channels: Sequence[int],
                    num_queries: int,
                    num_points: int,
                    channels: int = 16,
                    heads: int = 2) -> ConfigDict:
    """Shrink a MaskFormer / Mask2Former head config in place: ``channels``
    wide with ``heads`` heads and feed-forwards twice as wide in the decoder
    (and in Mask2Former's deformable pixel decoder, one layer of 2 points),
    GN(4) in the pixel decoder.

    Args:
        head (ConfigDict): The ``decode_head`` of a config.
        in_channels (Sequence[int]): The backbone's stage widths.
        num_queries (int): Queries of the decoder.
        num_points (int): Mask2Former's points of the mask loss.
        channels (int): Width of the decoder and pixel decoder.
        heads (int): Heads of their attentions.

    Returns:
        ConfigDict: ``head``.
    """
    C = channels
    head.update(
        in_channels=in_channels,
        feat_channels=C,
        out_channels=C,
        num_queries=num_queries)
    pixel_decoder = head.pixel_decoder
    pixel_decoder.norm_cfg = dict(type='GN', num_groups=4)
    encoder = pixel_decoder.get('encoder')
    if encoder:  # Mask2Former's deformable pixel decoder
        encoder.num_layers = 1
        encoder.layer_cfg.self_attn_cfg.update(
            embed_dims=C, num_heads=heads, num_points=2)
        encoder.layer_cfg.ffn_cfg.update(
            embed_dims=C, feedforward_channels=2 * C)
        pixel_decoder.positional_encoding.num_feats = C // 2
        head.train_cfg.num_points = num_points
    head.positional_encoding.num_feats = C // 2
    layer = head.transformer_decoder.layer_cfg
    for attn in ('self_attn_cfg', 'cross_attn_cfg'):
        layer[attn].update(embed_dims=C, num_heads=heads)
    layer.ffn_cfg.update(embed_dims=C, feedforward_channels=2 * C)
    return head


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


def tiny_train_step(path: str, options: dict, size: int = 64):
    """Build a config's model shrunk by ``options``, run the loss on two
    random images and backpropagate: the loss and every backbone gradient
    are finite. Returns the config, the model and the losses."""
    from mmseg.registry import MODELS
    cfg = Config.fromfile(path)
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None  # no download
    cfg.merge_from_dict(options)
    sync_bn_to_bn(cfg.model)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    samples = seg_samples(2, size, size, cfg.model.decode_head.num_classes)
    torch.manual_seed(0)
    inputs = torch.randn(2, 3, size, size)
    losses = model(inputs, samples, mode='loss')
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    params = dict(model.backbone.named_parameters())
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in params.values() if p.requires_grad)
    return cfg, model, losses


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


def grads(model) -> dict:
    """Gradients of all parameters that received one, by name."""
    return {
        n: p.grad.clone()
        for n, p in model.named_parameters() if p.grad is not None
    }


def outputs_loss(outs) -> Tensor:
    """A loss over every tensor of a backbone's outputs."""
    return sum(o.square().mean() for o in tree_flatten(outs)[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# ------------------------------------------------------------ measurements


def saved_bytes(fn):
    """Bytes of the tensors autograd saves for the backward of ``fn()``,
    and what ``fn`` returned."""
    from torch.autograd.graph import saved_tensors_hooks
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(sizes), out


def saved_scores_bytes(model, x, n: int) -> int:
    """Bytes of the distinct ``[..., n, n]`` tensors (attention scores or
    probabilities) that a training forward of ``model`` saves."""
    from torch.autograd.graph import saved_tensors_hooks
    squares = {}

    def pack(t):
        if t.shape[-2:] == (n, n):
            squares[t.untyped_storage().data_ptr()] = t.nbytes
        return t

    model.train()
    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(squares.values())


class ShapeSpy(TorchDispatchMode):
    """Records the aten ops that run and the shapes of what they return."""

    def __init__(self):
        super().__init__()
        self.shapes, self.ops = [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        self.shapes += [
            tuple(t.shape) for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor)
        ]
        return out

    def fused(self) -> bool:
        """Whether attention ran in SDPA's flash kernel only (its math
        fallback would run a softmax)."""
        return ('aten._scaled_dot_product_flash_attention_for_cpu' in self.ops
                and 'aten._softmax' not in self.ops)


# Ops that copy a device tensor's values to the host (a synchronisation on
# a GPU): Python scalars from tensors, and outputs sized by values.
HOST_READS = ('aten._local_scalar_dense', 'aten.nonzero', 'aten.masked_select',
              'aten.unique_dim', 'aten._unique2', 'aten.item')


class HostReads(TorchDispatchMode):
    """Records the ops of :data:`HOST_READS` that run (on any device): the
    CPU stand-in of ``torch.cuda.set_sync_debug_mode('error')``."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket) in HOST_READS:
            self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


# ----------------------------------------------------------- shared checks


def build_pair(ref_cls, cls, **args):
    """mmseg's backbone ``ref_cls`` and its elliptical version ``cls`` in
    dot-product mode (``elliptical_layers=[]``), each built and initialised
    from seed 0."""
    pair = []
    for build, extra in ((ref_cls, {}), (cls, dict(elliptical_layers=[]))):
        torch.manual_seed(0)
        model = build(**extra, **args)
        model.init_weights()
        pair.append(model)
    return pair


def check_dot_product_equals_mmseg(ref_cls,
                                   cls,
                                   x: Tensor,
                                   randomised: bool = False,
                                   **args) -> None:
    """``cls(elliptical_layers=[])`` is mmseg's ``ref_cls``: from the same
    seed the same state dict (the conversion consumes no RNG), and the same
    outputs (every tensor of them), also with ``randomised`` weights
    (:func:`randomise`, loaded into both)."""
    ref, ours = build_pair(ref_cls, cls, **args)
    for (k1, p1), (k2, p2) in zip(ref.state_dict().items(),
                                  ours.state_dict().items()):
        assert k1 == k2 and torch.equal(p1, p2)
    if randomised:
        randomise(ref)
        ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    expected, outs = ref(x), ours(x)
    assert len(outs) == len(expected)
    for a, b in zip(
            tree_flatten(expected)[0], tree_flatten(outs)[0], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def check_matches_naive(model,
                        naive: Callable,
                        ref: torch.nn.Module,
                        x: Tensor,
                        atol: float = 1e-4) -> None:
    """The elliptical ``model`` (eval, no grad) gives ``naive(model, x)``'s
    outputs, and not those of ``ref`` (mmseg's model) with its weights."""
    model.eval()
    with torch.no_grad():
        outs = model(x)
        expected = naive(model, x)
        assert len(outs) == len(expected)
        for a, b in zip(outs, expected):
            torch.testing.assert_close(a, b, atol=atol, rtol=atol)
        ref.load_state_dict(model.state_dict())
        ref.eval()  # mmseg's train()/eval() return None: not chained
        assert not torch.allclose(outs[-1], ref(x)[-1], atol=1e-3)


def check_interchange(ref, ours) -> None:
    """mmseg's model ``ref`` and the plugin's ``ours`` have the same
    state-dict keys in the same order, load each other's weights strictly,
    and hold the same tensors afterwards (``ref``'s)."""
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(ref.state_dict(), strict=True)
    ref.load_state_dict(ours.state_dict(), strict=True)
    for (k, a), b in zip(ref.state_dict().items(), ours.state_dict().values()):
        assert torch.equal(a, b), k


def check_loss_trains_every_parameter(model: nn.Module,
                                      losses: Dict[str, Tensor]) -> None:
    """The sum of the ``loss`` entries of ``losses`` (``model``'s training
    losses) is finite, and its backward gives every trainable parameter of
    ``model`` a gradient, all finite."""
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    missing = [
        n for n, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    assert not missing, missing
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)


def check_finite_forward_backward(model,
                                  x: Tensor,
                                  train: bool,
                                  input_grad: bool = False,
                                  grad: Optional[bool] = None) -> None:
    """``model(x)`` is finite in train (``train``) or eval mode; in train
    mode so is every gradient (of the input too with ``input_grad``).
    ``grad``: autograd on during the forward (defaults to ``train``)."""
    model.train(train)
    if input_grad:
        x = x.clone().requires_grad_()
    model.zero_grad()
    with torch.set_grad_enabled(train if grad is None else grad):
        outs = model(x)
    assert all(torch.isfinite(o).all() for o in outs)
    if train:
        outputs_loss(outs).backward()
        assert all(
            torch.isfinite(p.grad).all() for p in model.parameters()
            if p.grad is not None)
        if input_grad:
            assert torch.isfinite(x.grad).all()


def check_saves_no_more_scores_than_mmseg(ref_cls, cls, x: Tensor, n: int,
                                          **args) -> None:
    """A training forward of ``cls`` keeps no more ``[..., n, n]`` scores
    (by bytes) for the backward than mmseg's ``ref_cls``, elliptical or
    not."""
    saved = {}
    for name, build in (('mmseg', lambda: ref_cls(**args)),
                        ('elliptical', lambda: cls(**args)),
                        ('dot-product',
                         lambda: cls(elliptical_layers=[], **args))):
        torch.manual_seed(0)
        saved[name] = saved_scores_bytes(build(), x, n)
    assert saved['mmseg'] > 0
    assert saved['elliptical'] <= saved['mmseg'], saved
    assert saved['dot-product'] <= saved['mmseg'], saved


def check_beit_inputs(cls) -> None:
    """A BEiT-family ``cls`` (built with :data:`BEIT_ARCH`) rejects what is
    not a batch of images and a patch grid other than ``img_size``'s (mmseg's
    BEiT would silently use wrong relative positions), and runs on larger
    images of that grid."""
    model = cls(**BEIT_ARCH).eval()
    with pytest.raises(ValueError, match=r'float batch of images'):
        model(torch.zeros(3, 32, 24))
    # Same number of patches (12), other grid.
    with pytest.raises(
            ValueError,
            match=(
                rf'{cls.__name__} was built for img_size=\(32, 24\) \(a 4x3 '
                r'patch grid.*got images of \(24, 32\) \(3x4 patches\); set '
                'img_size to the crop size')):
        model(torch.zeros(1, 3, 24, 32))
    assert model(torch.zeros(1, 3, 39, 31))[0].shape == (1, 24, 4, 3)


def check_with_cp(build,
                  x,
                  loss: Optional[Callable] = None,
                  max_saved: Optional[float] = 0.5) -> tuple:
    """``build(with_cp)`` (a model in train mode): with ``with_cp=True`` the
    forward saves less for the backward (below ``max_saved`` of it; None:
    any less), and the loss and every gradient are those without.

    Args:
        build (callable): ``with_cp -> model``.
        x (Tensor): The input.
        loss (callable, optional): ``(model, x) -> loss``; defaults to
            :func:`outputs_loss` of ``model(x)``.
        max_saved (float, optional): Bound on the saved-bytes ratio.

    Returns:
        tuple: The two models (without, with ``with_cp``).
    """
    if loss is None:
        loss = lambda model, x: outputs_loss(model(x))  # noqa: E731
    results, models = {}, []
    for with_cp in (False, True):
        model = build(with_cp)
        models.append(model)
        nbytes, value = saved_bytes(lambda: loss(model, x))
        value.backward()
        results[with_cp] = nbytes, value.detach(), grads(model)
    (plain_bytes, plain_loss, plain), (cp_bytes, cp_loss, cp) = \
        results[False], results[True]
    bound = plain_bytes * (1 if max_saved is None else max_saved)
    assert cp_bytes < bound, (cp_bytes, plain_bytes)
    torch.testing.assert_close(cp_loss, plain_loss, rtol=0, atol=1e-6)
    assert cp.keys() == plain.keys() and len(plain) > 0
    for name in plain:
        torch.testing.assert_close(
            cp[name], plain[name], rtol=0, atol=1e-6, msg=name)
    return tuple(models)


def check_attention_dropout(attn, run, clean) -> None:
    """``run()`` calls the attention module ``attn`` (built with dropout 0.5
    on the probabilities): in eval mode it gives ``clean`` (the oracle's
    output, without dropout); in train mode other outputs, with fresh masks
    at each call and the same ones under the same seed."""
    attn.eval()
    torch.testing.assert_close(run(), clean, atol=1e-5, rtol=1e-5)
    attn.train()
    torch.manual_seed(1)
    first, second = run(), run()
    assert not torch.allclose(first, clean, atol=1e-3)
    assert not torch.allclose(first, second, atol=1e-3)
    torch.manual_seed(1)
    torch.testing.assert_close(run(), first)


def check_bf16(model,
               x,
               how: str,
               output: Optional[Callable] = None) -> Tensor:
    """Under CPU bf16 autocast (forward and backward) or as a bf16 model
    (``model.bfloat16()``): finite outputs and gradients, close to fp32's
    but not equal (so bf16 was in effect).

    Args:
        model (nn.Module): The model (its mode is kept).
        x (Tensor): The fp32 input.
        how (str): ``'autocast'`` or ``'bf16_model'``.
        output (callable, optional): ``(model, x) -> tensor`` compared;
            defaults to the last output of ``model(x)``.

    Returns:
        Tensor: The bf16 output.
    """
    if output is None:
        output = lambda model, x: model(x)[-1]  # noqa: E731
    with torch.no_grad():
        ref = output(model, x)
    if how == 'autocast':
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = output(model, x)
    else:
        out = output(model.bfloat16(), x.bfloat16())
        assert out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    assert all(
        torch.isfinite(p.grad).all() for p in model.parameters()
        if p.grad is not None)
    # bf16 keeps ~3 significant digits.
    err = (out.float() - ref).abs().max() / ref.abs().max()
    assert 0 < err < 0.1, f'bf16 deviates from fp32 by {err:.3g} (rel.)'
    return out


def check_compiled(model, x, fullgraph: bool = True) -> list:
    """``torch.compile(model)`` (backend ``aot_eager``: the graph torch
    traces, without inductor's kernels) gives eager's outputs and gradients
    in train mode, and eager's outputs in eval mode without grad (the two
    ways the value chain runs). ``model`` has no dropout. ``fullgraph``:
    one graph, no breaks. Returns the compiled outputs of the train step."""

    def train_step(fn):
        model.zero_grad()
        outs = fn(x)
        sum(o.square().mean() for o in outs).backward()
        return [o.detach() for o in outs], grads(model)

    torch._dynamo.reset()
    try:
        model.train()
        compiled = torch.compile(
            model, backend='aot_eager', fullgraph=fullgraph)
        (outs, g), (ref_outs, ref_g) = train_step(compiled), train_step(model)
        train_outs = list(outs)
        model.eval()
        with torch.no_grad():
            outs += compiled(x)
            ref_outs += model(x)
    finally:
        torch._dynamo.reset()
    for a, b in zip(outs, ref_outs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert g.keys() == ref_g.keys() and len(g) > 0
    for name in ref_g:
        torch.testing.assert_close(
            g[name], ref_g[name], atol=1e-6, rtol=1e-5, msg=name)
    return train_outs


def assert_close_relative(got: Tensor,
                          expected: Tensor,
                          tol: float,
                          what: str = '') -> None:
    """``|got - expected| <= tol * |expected|`` in the Euclidean norm (fp32):
    a bound on the error of the whole tensor relative to its size."""
    got, expected = got.float(), expected.float()
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    err, size = float((got - expected).norm()), float(expected.norm())
    assert err <= tol * size, f'{what}: {err:.3g} > {tol} * {size:.3g}'


def check_fused_equals_explicit(model,
                                x,
                                autocast: Optional[torch.dtype] = None,
                                tol: float = 1e-4,
                                grad_tol: Optional[float] = None) -> None:
    """The fused path (SDPA) and the explicit one give the same outputs in
    eval mode without grad, and the same outputs and gradients in train
    mode (``model`` has no dropout), on the input's device, optionally
    under autocast to ``autocast``; each within ``tol`` of the largest
    value (:func:`assert_close_relative`). Each path really runs (an SDPA
    spy).

    Args:
        model (nn.Module): A backbone or head with elliptical attentions.
        x (Tensor or list): Its input.
        autocast (torch.dtype, optional): Autocast to this dtype.
        tol (float): Relative tolerance of the outputs.
        grad_tol (float, optional): Of the gradients; defaults to ``tol``.
    """
    import torch.nn.functional as F
    device = tree_flatten(x)[0][0].device.type
    sdpa, calls = F.scaled_dot_product_attention, []

    def spy(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    def cast():
        return torch.autocast(
            device, dtype=autocast, enabled=autocast is not None)

    def run(fused: bool):
        set_fused(model, fused)
        model.eval()
        with torch.no_grad(), cast():
            infer = [o.float() for o in as_list(model(x))]
        model.train()
        model.zero_grad()
        with cast():
            outs = [o.float() for o in as_list(model(x))]
        outputs_loss(outs).backward()
        return infer + [o.detach() for o in outs], grads(model)

    F.scaled_dot_product_attention = spy
    try:
        explicit = run(False)
        assert not calls, 'fused_attn=False ran SDPA'
        fused = run(True)
        assert calls, 'fused_attn=True never ran SDPA'
    finally:
        F.scaled_dot_product_attention = sdpa
        set_fused(model, True)
    assert len(fused[0]) == len(explicit[0])
    for i, (a, b) in enumerate(zip(fused[0], explicit[0])):
        assert torch.isfinite(a).all() and torch.isfinite(b).all(), i
        assert_close_relative(a, b, tol, f'output {i}')
    # Gradients as one vector: a tensor of tiny gradients (the first
    # layers') is as close in absolute terms, not relative to its own size.
    assert fused[1].keys() == explicit[1].keys() and len(fused[1]) > 0
    names = sorted(explicit[1])
    assert_close_relative(
        torch.cat([fused[1][n].flatten().float() for n in names]),
        torch.cat([explicit[1][n].flatten().float() for n in names]),
        tol if grad_tol is None else grad_tol, 'gradients')


# ---------------------------------------------------------- benchmark

BENCH_VIT_T = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')
BENCH_MMSEG_VIT_T = 'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_' \
    'ade20k-512x512.py'
# The ViT-T config shrunk for the benchmark tests (as --cfg-options).
BENCH_TINY = {
    'model.backbone.num_layers': 3,
    'model.backbone.embed_dims': 24,
    'model.backbone.img_size': 64,
    'model.decode_head.in_channels': 24,
    'model.decode_head.channels': 24,
    'model.decode_head.embed_dims': 24,
}
BENCH_TINY_ARGS = ['--cfg-options'
                   ] + [f'{k}={v}' for k, v in BENCH_TINY.items()]


def tiny_variants(
        roles=('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref'),
        config=BENCH_VIT_T,
        **kwargs):
    """The benchmark's variants of a shrunk (:data:`BENCH_TINY`) config."""
    from mmseg_elliptical.benchmark.models import derive_variants
    from mmseg_elliptical.utils.config import load_config
    cfg = load_config(config, BENCH_TINY, no_pretrained=True)
    return derive_variants('vit', config, cfg.model.to_dict(), roles, **kwargs)


# ------------------------------------------------------------------ tools


def run_command(
        args: Sequence[str],
        timeout: float = 300,
        env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``args`` in the repository root to a zero exit status.

    The test fails with the output's tail on another exit status, or when the
    command has not finished after ``timeout`` seconds: its process group
    (the command runs in a session of its own: a shell script and the
    torchrun it starts) then gets SIGTERM, on which torchrun stops its
    workers (they run in sessions of their own), and SIGKILL 30 s later.
    The output goes through files, so a process left behind cannot block
    the test on a pipe.

    Args:
        args (Sequence[str]): The command line.
        timeout (float): Seconds. Defaults to 300.
        env (dict, optional): The environment. Defaults to this process's
            with ``OMP_NUM_THREADS=1``.

    Returns:
        subprocess.CompletedProcess: With ``stdout`` and ``stderr`` (str).
    """
    if env is None:
        env = dict(os.environ, OMP_NUM_THREADS='1')
    with tempfile.TemporaryFile('w+') as out, \
            tempfile.TemporaryFile('w+') as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True)
        try:
            proc.wait(timeout)
            failure = f'exit status {proc.returncode}' \
                if proc.returncode else None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            failure = f'not finished after {timeout} s'
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if failure:
        pytest.fail(
            f'{" ".join(args)[-300:]}: {failure}\n'
            f'--- stdout:\n{stdout[-2000:]}\n'
            f'--- stderr:\n{stderr[-4000:]}',
            pytrace=False)
    return subprocess.CompletedProcess(args, 0, stdout, stderr)


def load_tool(path: str):
    """The module of a command-line tool, e.g.
    ``load_tool('analysis_tools/collapse.py')`` (under ``tools/``).

    It is registered in ``sys.modules`` (dataclasses of the tool look their
    module up there)."""
    name = 'tool_' + osp.splitext(path)[0].replace('/', '_')
    spec = importlib.util.spec_from_file_location(
        name, osp.join(ROOT, 'tools', path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def run_tool_main(monkeypatch, path: str, *args: str) -> None:
    """Run ``tools/<path>`` as ``__main__`` in this process with ``args``
    on its command line."""
    import runpy
    monkeypatch.setattr(sys, 'argv', [osp.basename(path), *args])
    runpy.run_path(osp.join(ROOT, 'tools', path), run_name='__main__')


def run_tool(script: str, *args: str, timeout: float = 600) -> str:
    """Run ``tools/<script>`` in a fresh interpreter; its output."""
    proc = run_command(
        [sys.executable,
         osp.join(ROOT, 'tools', script), *args],
        timeout=timeout)
    return proc.stdout + proc.stderr


# ------------------------------------------- analysis: tiny saved models

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
)
# MAE: BEiT's layout and sizes (its qkv bias and absolute position embedding
# change neither)
FAMILIES['mae'] = dict(
    FAMILIES['beit'],
    backbone=dict(FAMILIES['beit']['backbone'], type='EllipticalMAE'))


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
