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
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os
import os.path as osp
from typing import Optional, Sequence

from mmseg_elliptical.utils.arguments import checkpoint_file, tool_main


def source(text: str) -> str:
    """A URL, or a local file that is a complete torch checkpoint."""
    return text if '://' in text else checkpoint_file(text)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work."""
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s SRC DST [--unsafe-pickle]')
    parser.add_argument(
        'src', type=source, help='source checkpoint: path or URL')
    parser.add_argument('dst', help='output path of the mmseg checkpoint')
    parser.add_argument(
        '--unsafe-pickle',
        action='store_true',
        help='load a local SRC with torch.load(weights_only=False), for '
        'training checkpoints that pickle Python objects (e.g. DeiT\'s '
        '`args` Namespace). Only for files you trust: unpickling can run '
        'arbitrary code.')
    args = parser.parse_args(argv)
    if osp.isdir(args.dst):
        parser.error(f'argument dst: {args.dst} is a folder; give the path '
                     'of the checkpoint to write')
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> None:
    """Convert SRC and write DST."""
    args = parse_args(argv)
    if check_only:
        return
    import torch

    import mmseg_elliptical.plugin  # noqa: F401 (weights-only loader)
    from mmseg_elliptical.converters import convert_deit, load_source
    state_dict, dropped = convert_deit(
        load_source(args.src, args.unsafe_pickle))
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
