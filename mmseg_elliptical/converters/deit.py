"""Convert timm / DeiT / MahalaVisionTransformer weights to mmseg's ViT
layout with mmseg's own ``convert_vit`` (docs/reliability.md)."""
import re
import runpy
from collections import OrderedDict
from typing import Callable, Dict, List, Mapping, Tuple

import torch
from mmengine.runner import CheckpointLoader
from torch import Tensor

from ..errors import SourceError  # noqa: F401
from ..utils import mmseg_tool_path

WRAPPERS = ('state_dict', 'model', 'module')
# Source keys with no counterpart in a segmentation backbone.
CLASSIFIER_PREFIXES = ('head.', 'head_dist.', 'pre_logits.')
# Every key of mmseg's VisionTransformer (without pre_norm / patch_norm).
MMSEG_VIT_KEYS = re.compile(
    r'^(cls_token|pos_embed|patch_embed\.projection\.(weight|bias)|'
    r'ln1\.(weight|bias)|layers\.\d+\.(ln1|ln2)\.(weight|bias)|'
    r'layers\.\d+\.attn\.attn\.(in_proj_weight|in_proj_bias|'
    r'out_proj\.weight|out_proj\.bias)|'
    r'layers\.\d+\.ffn\.layers\.(0\.0|1)\.(weight|bias))$')


def mmseg_convert_vit() -> Callable[[Mapping[str, Tensor]], OrderedDict]:
    """mmseg's ``convert_vit`` from the ``vit2mmseg.py`` its wheel ships."""
    namespace = runpy.run_path(
        mmseg_tool_path('model_converters/vit2mmseg.py'), run_name='vit2mmseg')
    return namespace['convert_vit']


def state_dict_of(checkpoint: Mapping) -> Dict[str, Tensor]:
    """The state dict inside a checkpoint, bare or wrapped (``model``,
    ``state_dict``, ``module``)."""
    for key in WRAPPERS:
        if isinstance(checkpoint.get(key), Mapping):
            return dict(checkpoint[key])
    return dict(checkpoint)


def convert_deit(
        checkpoint: Mapping) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """Convert a timm / DeiT / MahalaVisionTransformer checkpoint.

    Returns:
        tuple[OrderedDict[str, Tensor], list[str]]: The state dict in mmseg's
        ``VisionTransformer`` layout and the dropped source keys.

    Raises:
        ValueError: If the source is not a ViT with a class token, or keeps
            weights mmseg's ViT has no place for.
    """
    src = state_dict_of(checkpoint)
    src = {
        k[len('module.'):] if k.startswith('module.') else k: v
        for k, v in src.items()
    }
    if 'cls_token' not in src or 'pos_embed' not in src:
        raise SourceError(
            'convert_deit: expected a timm/DeiT ViT state dict with '
            f'cls_token and pos_embed, got keys {sorted(src)[:8]}...')
    dropped = [k for k in src if k.startswith(CLASSIFIER_PREFIXES)]
    if 'dist_token' in src:
        # Distilled DeiT: tokens are [cls, dist, patches...]; keep cls.
        dropped.append('dist_token')
        pos = src['pos_embed']
        src['pos_embed'] = pos[:, [0, *range(2, pos.shape[1])]].clone()
    src = {k: v for k, v in src.items() if k not in dropped}
    out = mmseg_convert_vit()(src)
    unknown = [k for k in out if not MMSEG_VIT_KEYS.match(k)]
    if unknown:
        raise SourceError(
            f'convert_deit: mmseg\'s VisionTransformer has no parameters for '
            f'{unknown} (converted names); the source has a layout this '
            'converter does not know (e.g. LayerScale or fc_norm).')
    return out, sorted(dropped)


def load_source(src: str, unsafe_pickle: bool = False) -> dict:
    """Load a source checkpoint (path or URL) weights-only.

    Args:
        src (str): Local path or URL.
        unsafe_pickle (bool): ``weights_only=False`` for a local file (only
            for trusted files).

    Raises:
        SourceError: If the weights-only loader refuses the file.
    """
    if unsafe_pickle:
        return torch.load(src, map_location='cpu', weights_only=False)
    try:
        return CheckpointLoader.load_checkpoint(src, map_location='cpu')
    except Exception as e:  # torch's UnpicklingError and friends
        if 'weights_only' not in str(e) and 'Unsupported global' not in str(e):
            raise
        detail = next(
            (line.strip()
             for line in str(e).splitlines() if 'Unsupported global' in line),
            str(e).splitlines()[0])
        raise SourceError(
            f'convert_deit: {src} holds pickled Python objects that the '
            f'weights-only loader refuses ({detail}). If you trust the file, '
            'rerun with --unsafe-pickle.') from e
