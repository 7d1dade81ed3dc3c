"""Builders of the shipped configs' tests: the config files by folder, what
they inherit from mmseg, and their models shrunk to a tiny size (ViT, MiT,
PCPVT heads; MaskFormer, Mask2Former and KNet; a query head alone).
"""
import ast
import copy
import glob
import os.path as osp
from typing import Dict, List, Sequence

from builders import ROOT
from mmengine.config import Config, ConfigDict


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


def mmseg_config_file(name: str) -> str:
    """The file of an ``mmseg::`` config, where mmengine's resolution finds
    it (``mmseg/.mim/configs``), for reading it without its
    ``custom_imports``."""
    from mmengine.utils import get_installed_path
    path = osp.join(
        get_installed_path('mmsegmentation'), '.mim', 'configs',
        name.split('::', 1)[-1])
    assert osp.isfile(path), path
    return path


def mmseg_base(path: str) -> str:
    """The ``mmseg::`` config a shipped config inherits (maybe through one of
    ours)."""
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


def tiny_swin(bb: ConfigDict, size: int) -> list:
    """Shrink a Swin config in place (depths and heads kept); returns the
    stage widths."""
    bb.embed_dims //= 4  # 8 channels per head in every Swin of these configs
    bb.pop('init_cfg', None)
    bb.pretrain_img_size = size
    return [bb.embed_dims * 2**i for i in range(4)]


def _map_channels(cfg, mapping):
    """Replace channel counts of the old backbone by the tiny one's."""
    if isinstance(cfg, (list, tuple)):
        return type(cfg)(_map_channels(c, mapping) for c in cfg)
    if not isinstance(cfg, dict):
        return cfg
    for key, value in cfg.items():
        if key in ('in_channels', 'out_channels', 'embed_dims', 'channels'):
            if isinstance(value, int):
                cfg[key] = mapping.get(value, value)
            elif isinstance(value, (list, tuple)):
                cfg[key] = type(value)(mapping.get(v, v) for v in value)
        else:
            cfg[key] = _map_channels(value, mapping)
    return cfg


def tiny_head_model(model_cfg: ConfigDict, size: int) -> ConfigDict:
    """A ViT, MiT or PCPVT config's model (its decode, auxiliary heads and
    neck) shrunk to a few tiny layers for ``size`` x ``size`` inputs,
    offline, BN for SyncBN."""
    cfg = copy.deepcopy(model_cfg)
    cfg.pretrained = None
    cfg.data_preprocessor.size = (size, size)
    bb = cfg.backbone
    bb.pop('init_cfg', None)
    kind = mmseg_names().get(bb.type, bb.type)
    if kind == 'VisionTransformer':
        mapping = {bb.get('embed_dims', 768): 16}
        k = len(bb.out_indices) if isinstance(bb.out_indices,
                                              (list, tuple)) else 1
        bb.update(
            embed_dims=16,
            num_heads=2,
            num_layers=4,
            mlp_ratio=2,
            img_size=(size, size),
            out_indices=tuple(range(4 - k, 4)) if k > 1 else 3)
    elif kind == 'MixVisionTransformer':
        old = [bb.embed_dims * h for h in bb.num_heads]
        bb.update(
            embed_dims=8, num_heads=[1, 2, 2, 4], num_layers=[2, 2, 2, 2])
        mapping = dict(zip(old, [8, 16, 16, 32]))
    elif kind == 'PCPVT':
        mapping = dict(zip(bb.embed_dims, [8, 16, 32, 64]))
        bb.update(
            embed_dims=[8, 16, 32, 64],
            num_heads=[1, 2, 4, 8],
            depths=[2, 2, 2, 2])
    else:
        raise AssertionError(f'no shrink rule for {kind}')
    for part in ('neck', 'decode_head', 'auxiliary_head'):
        if cfg.get(part):
            cfg[part] = sync_bn_to_bn(_map_channels(cfg[part], mapping))
    return cfg


def tiny_mask_model(path: str, size: int, channels: int) -> ConfigDict:
    """A MaskFormer, Mask2Former or KNet config's model at a tiny size
    (``size`` x ``size`` inputs, ``channels`` wide heads), offline, BN for
    SyncBN."""
    model = copy.deepcopy(Config.fromfile(path).model)
    model.pretrained = None
    model.data_preprocessor.size = (size, size)
    widths = tiny_swin(model.backbone, size)
    head = model.decode_head
    C = channels
    if osp.basename(osp.dirname(path)) == 'knet':
        head.kernel_generate_head.update(in_channels=widths, channels=C)
        for stage in head.kernel_update_head:
            stage.update(
                in_channels=C,
                out_channels=C,
                feedforward_channels=2 * C,
                num_heads=2)
            stage.kernel_updator_cfg.update(
                in_channels=C, feat_channels=C, out_channels=C)
        model.auxiliary_head.update(in_channels=widths[2], channels=C)
    else:
        tiny_query_head(
            head, widths, num_queries=8, num_points=256, channels=C, heads=2)
    return sync_bn_to_bn(model)
