"""The robustness grid of one model as one mmengine test loop.

``runner.test()`` runs :class:`CorruptionGridLoop` in place of the config's
``test_cfg``: mmengine builds the model, wraps it for the launcher and loads
the checkpoint once, and every cell runs the config's own test loop on its
own corrupted copy of the test dataloader, or an attack cell
(:class:`~.attacks.AdversarialTestLoop`) on the clean images. The images of
each cell are split across processes by the dataloader's sampler and its
metric is collected by mmengine's evaluator, as in ``tools/test.py``. A hook
such as :class:`CellHook` reads the finished cells.
"""
import copy
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from mmengine.hooks import Hook
from mmengine.runner import BaseLoop
from mmseg.registry import LOOPS

from ...utils.loaders import subset_loader_cfg
from ..attacks.pgd import AdversarialTestLoop, Attack
from ..attacks.transfer import TransferAttack, TransferTestLoop
from ..certification.cells import Certification
from ..certification.loop import CertifyTestLoop, draw_groups
from ..corruption.pipeline import corrupted_loader_cfg
from .areas import ImageAreas
from .store import cell_key

#: ``(corruption, severity)``, ``(None, None)`` (clean), an attack or a
#: certification.
Cell = Union[Tuple[Optional[str], Optional[int]], Attack, Certification]


def as_cell(cell: Union[Sequence, Dict, Attack, Certification]) -> Cell:
    """A cell from its config form: a pair, or an attack's or a
    certification's fields."""
    if isinstance(cell, (Attack, Certification)):
        return cell
    if isinstance(cell, dict):
        if 'sigma' in cell:
            return Certification(**cell)
        return (TransferAttack if 'source' in cell else Attack)(**cell)
    return tuple(cell)


def key_of(cell: Cell) -> str:
    """The store key of a cell."""
    if isinstance(cell, (Attack, Certification)):
        return cell.key
    return cell_key(*cell)


@LOOPS.register_module()
class CorruptionGridLoop(BaseLoop):
    """Run the config's test loop once per cell of a perturbation grid.

    Built by ``runner.test()`` from ``test_cfg=dict(type='CorruptionGridLoop',
    cells=..., test_loop=<the config's own test_cfg>)``. While a cell runs,
    :attr:`cell` is its ``(corruption, severity)`` (``(None, None)``: the
    clean images) or its :class:`~.attacks.Attack`, and :attr:`dataloader`,
    :attr:`evaluator` and :attr:`loop` are its own, so mmengine's hooks and
    log processor see the cell's dataloader.

    Args:
        runner (Runner): The runner.
        dataloader (dict): The config's ``test_dataloader`` (the runner
            passes its config); each cell gets a corrupted copy.
        evaluator (dict | list): The config's ``test_evaluator``; each cell
            gets a fresh one.
        cells (Sequence): ``(corruption, severity)`` pairs, ``(None, None)``
            for the clean images, attacks (:class:`~.attacks.Attack` or
            its fields as a dict) or certifications
            (:class:`~.certify_loop.Certification` or its fields; those of
            one noise level in a row share their draws).
        seed (int): Seed of the corruptions. Defaults to 0.
        max_images (int, optional): Evaluate only the first images.
        test_loop (dict, optional): The config's own ``test_cfg``
            (default: mmengine's ``TestLoop``).
    """

    def __init__(self,
                 runner,
                 dataloader: Dict,
                 evaluator: Union[Dict, List],
                 cells: Sequence[Sequence],
                 seed: int = 0,
                 max_images: Optional[int] = None,
                 test_loop: Optional[Dict] = None) -> None:
        if not isinstance(dataloader, dict):
            raise TypeError('CorruptionGridLoop needs the test dataloader as '
                            f'a config dict, got {type(dataloader)}.')
        super().__init__(runner, None)
        self.loader_cfg = dataloader
        self.evaluator_cfg = evaluator
        self.cells: List[Cell] = [as_cell(c) for c in cells]
        self.seed = seed
        self.max_images = max_images
        self.test_loop = dict(test_loop or {})
        self.test_loop.setdefault('type', 'TestLoop')
        self.cell: Optional[Cell] = None
        self.evaluator = None
        self.loop = None

    def run(self) -> Dict[str, Dict]:
        """Run every cell.

        Returns:
            dict: ``{cell_key: metrics}``.
        """
        results = {}
        for start, stop in draw_groups(self.cells):
            cell = self.cells[start]
            if isinstance(cell, Certification):
                loop_cfg = dict(
                    type=CertifyTestLoop.__name__,
                    cells=[c.to_dict() for c in self.cells[start:stop]],
                    fp16=self.test_loop.get('fp16', False))
                loader = subset_loader_cfg(self.loader_cfg, self.max_images)
            elif isinstance(cell, Attack):
                loop_cfg = dict(
                    type=(TransferTestLoop if isinstance(cell, TransferAttack)
                          else AdversarialTestLoop).__name__,
                    attack=cell.to_dict(),
                    fp16=self.test_loop.get('fp16', False))
                loader = subset_loader_cfg(self.loader_cfg, self.max_images)
            else:
                loop_cfg = copy.deepcopy(self.test_loop)
                loader = corrupted_loader_cfg(self.loader_cfg, *cell,
                                              self.seed, self.max_images)
            loop = LOOPS.build(
                loop_cfg,
                default_args=dict(
                    runner=self.runner,
                    dataloader=loader,
                    evaluator=copy.deepcopy(self.evaluator_cfg)))
            self.cell, self.loop = cell, loop
            self.dataloader, self.evaluator = loop.dataloader, loop.evaluator
            found = loop.run()  # a certification loop: one entry per cell
            results.update(
                found if isinstance(loop, CertifyTestLoop
                                    ) else {key_of(cell): found})
        return results


def image_areas(evaluator) -> Optional[ImageAreas]:
    """The per-image areas an evaluator's metric kept (``keep_image_areas``
    of :class:`~mmseg_elliptical.evaluation.PerClassIoUMetric`), or None."""
    for metric in getattr(evaluator, 'metrics', []):
        areas = getattr(metric, 'image_areas', None)
        if areas is not None:
            return ImageAreas(*areas)
    return None


def image_paths(dataloader) -> Optional[List[str]]:
    """The paths of a dataloader's images, in the order a test loop
    evaluates them (its dataset's ``img_path``), or None when the dataset
    does not give them."""
    dataset = getattr(dataloader, 'dataset', None)
    try:
        paths = [
            dataset.get_data_info(i).get('img_path')
            for i in range(len(dataset))
        ]
    except (AttributeError, TypeError, KeyError, IndexError):
        return None
    return paths if all(isinstance(p, str) for p in paths) else None


def image_labelled(evaluator) -> Optional[np.ndarray]:
    """The labelled pixels of every image an evaluator's metric kept
    (``[images]``), or None."""
    for metric in getattr(evaluator, 'metrics', []):
        found = getattr(metric, 'image_labelled', None)
        if found is not None:
            return found
    return None


class CellHook(Hook):
    """Hand every finished cell of a :class:`CorruptionGridLoop` to a
    callback: ``on_cell(key, metrics, areas, seconds, images)``.

    ``metrics`` are the evaluator's (the same on every process) and, for an
    attack, ``max_linf`` and ``max_l2`` of its perturbations, ``areas`` the
    per-image areas (on the main process, when kept; else None; with the
    labelled pixels of each image as a third entry when kept),
    ``seconds`` the cell's wall time and ``images`` the paths of its images
    in order (:func:`image_paths`).

    Args:
        on_cell (Callable): The callback.
    """
    priority = 'LOWEST'

    def __init__(self, on_cell: Callable) -> None:
        self.on_cell = on_cell
        self.start = 0.0

    def before_test_epoch(self, runner) -> None:
        """Start the cell's clock."""
        self.start = time.time()

    def after_test_epoch(self, runner, metrics: Optional[Dict] = None) -> None:
        """Pass the finished cell on."""
        loop = runner.test_loop
        if isinstance(loop, CorruptionGridLoop):
            metrics = dict(metrics or {})
            if isinstance(loop.loop, AdversarialTestLoop):
                metrics.update(loop.loop.perturbation_norms())
            areas = image_areas(loop.evaluator)
            labelled = image_labelled(loop.evaluator)
            if areas is not None and labelled is not None:
                areas = (*areas, labelled)
            self.on_cell(
                key_of(loop.cell), metrics, areas,
                time.time() - self.start, image_paths(loop.dataloader))
