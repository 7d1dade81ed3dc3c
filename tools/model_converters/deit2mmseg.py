"""Convert timm / DeiT / MahalaVisionTransformer weights for mmseg's ViT.

Usage::

    python tools/model_converters/deit2mmseg.py SRC DST [--unsafe-pickle]

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

import mmseg_elliptical  # noqa: F401  (weights-only checkpoint loader)
from mmseg_elliptical.converters import convert_deit, load_source


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


def main() -> None:
    args = parse_args()
    try:
        source = load_source(args.src, args.unsafe_pickle)
    except ValueError as e:
        raise SystemExit(str(e))
    state_dict, dropped = convert_deit(source)
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
