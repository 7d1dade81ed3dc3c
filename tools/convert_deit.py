"""Convert timm / DeiT / MahalaVisionTransformer weights for mmseg's ViT.

Usage::

    python tools/convert_deit.py SRC DST [--unsafe-pickle]

SRC is a local file or URL holding a ViT state dict in timm layout
(``blocks.i.attn.qkv.weight`` ...), bare or wrapped in ``{'model': ...}``,
e.g. a DeiT release or a checkpoint of the authors' elliptical-attention
DeiT. DST is written as ``{'state_dict': ..., 'meta': ...}`` in the layout
of mmseg's ``VisionTransformer`` (= ``EllipticalVisionTransformer``): point a
config's ``model.pretrained`` (or the backbone's ``init_cfg=dict(
type='Pretrained', checkpoint=DST)``) at it.
"""
import argparse
import os
import os.path as osp

import torch
from mmengine.runner import CheckpointLoader

import mmseg_elliptical  # noqa: F401  (weights-only checkpoint loader)
from mmseg_elliptical.utils.convert import convert_deit


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='source checkpoint: path or URL')
    parser.add_argument('dst', help='output path of the mmseg checkpoint')
    parser.add_argument(
        '--unsafe-pickle',
        action='store_true',
        help='load a local SRC with torch.load(weights_only=False), for '
        'training checkpoints that pickle Python objects (e.g. DeiT\'s '
        '`args` Namespace). Only for files you trust: unpickling can run '
        'arbitrary code.')
    return parser.parse_args()


def load(src: str, unsafe_pickle: bool) -> dict:
    """Load SRC weights-only unless ``unsafe_pickle``."""
    if unsafe_pickle:
        return torch.load(src, map_location='cpu', weights_only=False)
    try:
        return CheckpointLoader.load_checkpoint(src, map_location='cpu')
    except Exception as e:  # torch's UnpicklingError and friends
        if 'weights_only' not in str(e) and 'Unsupported global' not in str(
                e):
            raise
        raise SystemExit(
            f'convert_deit: {src} holds pickled Python objects that the '
            f'weights-only loader refuses ({str(e).splitlines()[0]}). '
            'If you trust the file, rerun with --unsafe-pickle.') from e


def main() -> None:
    args = parse_args()
    state_dict, dropped = convert_deit(load(args.src, args.unsafe_pickle))
    if osp.dirname(args.dst):
        os.makedirs(osp.dirname(args.dst), exist_ok=True)
    torch.save(
        dict(
            state_dict=state_dict,
            meta=dict(source=args.src, dropped_keys=dropped)), args.dst)
    print(f'convert_deit: wrote {len(state_dict)} tensors to {args.dst}; '
          f'dropped {dropped or "nothing"}')


if __name__ == '__main__':
    main()
