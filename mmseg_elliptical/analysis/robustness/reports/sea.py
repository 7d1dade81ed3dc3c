"""SEA's own worst-case numbers in words, beside the worst case's
(:mod:`..verdicts.sea`)."""
from typing import Dict


def sea_text(worst: Dict) -> str:
    """``; as SEA's released code computes them: mIoU .., aAcc ..`` of a
    worst-case record, or ``''`` for a record of an older version."""
    if worst.get('mIoU_sea') is None:
        return ''
    aacc = worst.get('aAcc_sea')
    return (f'; as SEA\'s released code computes them: mIoU '
            f'{worst["mIoU_sea"]:.2f} (its search from '
            f'`{worst.get("sea_start")}`), aAcc '
            f'{"n/a" if aacc is None else format(aacc, ".2f")} (mean over '
            'images of each image\'s worst accuracy)')
