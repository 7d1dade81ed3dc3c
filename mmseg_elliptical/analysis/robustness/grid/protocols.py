"""Each model's cells of an attack grid. The corruption sets, groups and
protocols and the attack cells and protocols live with the tools'
argument checks (:mod:`mmseg_elliptical.utils.corruption_cells`,
:mod:`mmseg_elliptical.utils.attack_cells`); the package gathers them
(``robustness.PROTOCOLS``, ``robustness.attack_cells``, ...).
"""
from typing import Dict, List, Sequence

from ....utils.attack_cells import Attack


def model_cells(elliptical: Dict[str, bool], plain: Sequence[Attack],
                adaptive: Sequence[Attack]) -> Dict[str, List]:
    """Each model's cells: the clean one, ``plain``, then ``adaptive`` when
    the model has elliptical layers (``{name: has them}``)."""
    return {
        name: [(None, None), *plain, *(adaptive if has else [])]
        for name, has in elliptical.items()
    }
