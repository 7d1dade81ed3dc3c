"""Which cells a corruption grid runs: the corruption names, sets and
groups, the severities, the protocols (no image is touched here: the tools
check these before the heavy imports).

The corruption names are ``imagecorruptions``' (Hendrycks & Dietterich,
ICLR 2019): 15 benchmark corruptions in four groups (noise, blur, weather,
digital) and 4 held-out ones, one of each group. A protocol fixes the
corruptions, the severities and the metrics its report averages.
"""
from typing import Dict, List, NamedTuple, Sequence, Tuple

from ...errors import GridError
from ...utils.choices import (COMMON_CORRUPTIONS, CORRUPTIONS,
                              EXTRA_CORRUPTIONS, SEVERITIES)

#: The four groups of ImageNet-C, each with its held-out corruption last.
GROUPS: Dict[str, Tuple[str, ...]] = dict(
    noise=('gaussian_noise', 'shot_noise', 'impulse_noise', 'speckle_noise'),
    blur=('defocus_blur', 'glass_blur', 'motion_blur', 'zoom_blur',
          'gaussian_blur'),
    weather=('snow', 'frost', 'fog', 'brightness', 'spatter'),
    digital=('contrast', 'elastic_transform', 'pixelate', 'jpeg_compression',
             'saturate'))
#: Names ``--corruptions`` accepts besides single corruptions.
CORRUPTION_SETS: Dict[str, Tuple[str, ...]] = dict(
    all=CORRUPTIONS,
    common=COMMON_CORRUPTIONS,
    extra=EXTRA_CORRUPTIONS,
    **GROUPS)
#: The corruptions of the comparison report's robustness section: one of
#: each group.
DEFAULT_CORRUPTIONS = ('gaussian_noise', 'defocus_blur', 'snow', 'contrast')


class Protocol(NamedTuple):
    """A preset of the grid.

    Attributes:
        corruptions (tuple[str]): Grid rows.
        severities (tuple[int]): Grid columns.
        metrics (tuple[str]): Metrics whose clean value and mean over the
            corrupted cells the report gives (the first is ``--metric``'s
            default).
        description (str): What it reproduces.
    """
    corruptions: Tuple[str, ...]
    severities: Tuple[int, ...]
    metrics: Tuple[str, ...]
    description: str

    @property
    def passes(self) -> int:
        """Test passes per model: the clean set and every corrupted cell."""
        return 1 + len(self.corruptions) * len(self.severities)


PROTOCOLS: Dict[str, Protocol] = {
    'default':
    Protocol(CORRUPTIONS, SEVERITIES, ('mIoU', ),
             'all 19 corruptions at severities 1-5'),
    'ade20k-c':
    Protocol(
        COMMON_CORRUPTIONS, SEVERITIES, ('mIoU', ),
        'ADE20K-C: the 15 benchmark corruptions of Hendrycks & Dietterich at '
        'severities 1-5'),
    'paper':
    Protocol(
        CORRUPTIONS, (1, ), ('mIoU', 'mAcc', 'aAcc'),
        'the Elliptical Attention authors\' evaluation: 19 corruptions at '
        'severity 1, mIoU, mAcc and aAcc each averaged over the 19'),
}


def group_of(corruption: str) -> str:
    """The group (noise, blur, weather, digital) of a corruption."""
    for group, names in GROUPS.items():
        if corruption in names:
            return group
    raise GridError(f'Unknown corruption {corruption!r}.')


def resolve_corruptions(names: Sequence[str]) -> List[str]:
    """Expand set and group names and check every name.

    Args:
        names (Sequence[str]): Corruption names, or sets (``all``,
            ``common``, ``extra``) and groups (``noise``, ``blur``,
            ``weather``, ``digital``).

    Returns:
        list[str]: The corruptions, in order, without duplicates.

    Raises:
        GridError: An unknown name, naming the valid ones.
    """
    out: List[str] = []
    for name in names:
        for c in CORRUPTION_SETS.get(name, (name, )):
            if c not in CORRUPTIONS:
                raise GridError(f'Unknown corruption {c!r}; valid are '
                                f'{", ".join(CORRUPTIONS)} or a set '
                                f'({", ".join(CORRUPTION_SETS)}).')
            if c not in out:
                out.append(c)
    return out


def resolve_severities(severities: Sequence[int]) -> List[int]:
    """Sorted distinct severities, each checked to be 1-5.

    Raises:
        GridError: A severity out of range.
    """
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        raise GridError(f'Unknown severities {bad}; valid are 1-5.')
    return sorted(set(severities))
