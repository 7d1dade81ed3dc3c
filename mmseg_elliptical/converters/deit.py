"""Convert timm / DeiT / MahalaVisionTransformer weights to mmseg's ViT layout.

The key renaming is mmseg's own ``convert_vit`` (``tools/model_converters/
vit2mmseg.py`` in the mmseg wheel), loaded from the installed package rather
than copied. Around it this module handles what that function leaves to the
caller for DeiT and the authors' elliptical-attention
(``MahalaVisionTransformer``) checkpoints:

* the ``{'model': ...}`` / ``{'state_dict': ...}`` / ``{'module': ...}``
  wrappers;
* the distillation token of distilled DeiT: ``dist_token`` and its row of
  ``pos_embed`` (row 1, after the class token) are removed, since mmseg's ViT
  has a single class token (``head_dist`` goes with ``head``);
* classification-only weights (``head``, ``head_dist``, ``pre_logits``) are
  dropped and reported;
* anything left that mmseg's ``VisionTransformer`` has no parameter for
  (e.g. LayerScale ``ls1.gamma``, ``fc_norm``) is an error naming the keys,
  instead of a checkpoint that silently loads half its weights.

Elliptical attention adds no parameters, so the result loads strictly into
both ``VisionTransformer`` and ``EllipticalVisionTransformer``.
"""
import re
import runpy
from collections import OrderedDict
from typing import Callable, Dict, List, Mapping, Tuple

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
    """The state dict inside a timm / DeiT / mmengine checkpoint.

    Args:
        checkpoint (Mapping): A loaded checkpoint, e.g. ``{'model': sd}``.

    Returns:
        dict[str, Tensor]: The state dict.
    """
    for key in WRAPPERS:
        if isinstance(checkpoint.get(key), Mapping):
            return dict(checkpoint[key])
    return dict(checkpoint)


def convert_deit(
        checkpoint: Mapping) -> Tuple['OrderedDict[str, Tensor]', List[str]]:
    """Convert a timm / DeiT / MahalaVisionTransformer checkpoint.

    Args:
        checkpoint (Mapping): The loaded source, wrapped or not.

    Returns:
        tuple[OrderedDict[str, Tensor], list[str]]: The state dict in mmseg's
        ``VisionTransformer`` layout and the source keys that were dropped.

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
        unsafe_pickle (bool): Load a local file with
            ``torch.load(weights_only=False)`` instead, for training
            checkpoints that pickle Python objects (only for trusted files).

    Returns:
        dict: The loaded checkpoint.

    Raises:
        SourceError: If the weights-only loader refuses the file.
    """
    import torch
    from mmengine.runner import CheckpointLoader
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
