"""What seeds an image's random draws (a random start, the square
attack's squares, adversarial training's picks): its path under the data
root, so the draws are the same wherever the data lies (a temporary folder,
another node's mount, after a move)."""
import os.path as osp
from typing import List, Optional, Sequence


def image_key(path: str, root: Optional[str]) -> str:
    """An image's key for the draws: its path relative to ``root`` (the
    dataset's data root) when it lies under it, else the path as it is."""
    if root and osp.commonpath([osp.abspath(path),
                                osp.abspath(root)]) == osp.abspath(root):
        return osp.relpath(path, root)
    return path


def sample_keys(samples: Sequence, root: Optional[str]) -> List[str]:
    """:func:`image_key` of each data sample's ``img_path`` (its index in
    the batch where it has none)."""
    return [
        image_key(s.metainfo['img_path'], root)
        if 'img_path' in s.metainfo else str(i) for i, s in enumerate(samples)
    ]
