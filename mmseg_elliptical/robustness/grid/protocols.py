"""Each model's cells of an attack grid (the protocols and cells are in
``utils/corruption_cells.py`` and ``utils/attack_cells.py``)."""
from typing import Dict, List, Sequence

from ..attacks.cells import Attack


def model_cells(elliptical: Dict[str, bool], plain: Sequence[Attack],
                adaptive: Sequence[Attack]) -> Dict[str, List]:
    """Each model's cells: the clean one, ``plain``, then ``adaptive`` when
    the model has elliptical layers (``{name: has them}``)."""
    return {
        name: [(None, None), *plain, *(adaptive if has else [])]
        for name, has in elliptical.items()
    }
