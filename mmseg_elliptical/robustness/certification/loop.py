"""The certification cells of a grid as one mmengine test loop: every cell
of one noise level shares its noisy samples (SegCertify,
:mod:`..attacks.smoothing`)."""
import copy
from functools import partial
from typing import Dict, List, Sequence, Tuple

import torch
from mmengine.dist import broadcast_object_list, collect_results
from mmengine.model import is_model_wrapper
from mmengine.runner import TestLoop, autocast
from mmengine.structures import PixelData
from mmseg.registry import LOOPS
from mmseg.structures import SegDataSample
from torch import Tensor

from ..attacks.keys import sample_keys
from .cells import Certification
from .smoothing import ABSTAIN, certify_pixels, draw_generator, sample_counts


def noisy_logits(model, sample, images: Tensor) -> Tensor:
    """The logits ``[b, C, H, W]`` (at the label's size) of noisy copies of
    one image: mmseg's data preprocessor (normalisation, padding) and
    ``predict``, each copy with its own data sample."""
    samples = [SegDataSample(metainfo=dict(sample.metainfo)) for _ in images]
    data = model.data_preprocessor(
        dict(inputs=list(images), data_samples=samples), False)
    out = model.predict(data['inputs'], data['data_samples'])
    return torch.stack([s.seg_logits.data for s in out])


def certify_image(model, image: Tensor, sample, key: str,
                  cells: Sequence[Certification]) -> List[Tensor]:
    """The certified labels ``[H, W]`` of one image under each cell (all of
    one :attr:`~Certification.draws`), :data:`ABSTAIN` where it abstains.

    Args:
        model: A segmentor in eval mode (not a wrapper).
        image (Tensor): ``[3, H, W]`` in 0-255, as the data preprocessor
            receives it.
        sample (SegDataSample): Its data sample.
        key (str): What seeds its draws (:func:`~.keys.image_key`).
        cells (Sequence[Certification]): The cells.
    """
    first = cells[0]
    if any(c.draws != first.draws for c in cells):
        raise ValueError('certify_image needs cells of one noise level, n0, '
                         f'n and seed, got {[c.draws for c in cells]}.')
    device = next(model.parameters()).device
    guess, counts = sample_counts(
        partial(noisy_logits, model, sample), image.to(device), first.sigma,
        first.n0, first.n, draw_generator(key, first.seed), first.batch)
    return [
        certify_pixels(guess, counts, c.n, c.tau, c.alpha, c.correction)
        for c in cells
    ]


@LOOPS.register_module()
class CertifyTestLoop(TestLoop):
    """Certify every test image under cells that share their draws; each
    cell has its own evaluator, whose metrics count an abstaining pixel as
    wrong (certified mIoU and aAcc), and ``abstain``, the fraction of
    pixels that abstain. After the images, each cell's metrics go to the
    ``after_test_epoch`` hooks in turn, with the grid loop's ``cell`` and
    ``evaluator`` set to it (:class:`~.loop.CellHook` records each).

    Args:
        cells (list[dict]): :class:`Certification` fields, one noise level.
        **kwargs: ``TestLoop``'s arguments.
    """

    def __init__(self, runner, dataloader, evaluator, cells: List[Dict],
                 **kwargs) -> None:
        evaluators = [copy.deepcopy(evaluator) for _ in cells[1:]]
        super().__init__(runner, dataloader, evaluator, **kwargs)
        self.cells = [Certification(**c) for c in cells]
        self.evaluators = [self.evaluator
                           ] + [runner.build_evaluator(e) for e in evaluators]
        for e in self.evaluators[1:]:
            e.dataset_meta = self.evaluator.dataset_meta
        #: Per cell, each image's abstaining pixels and pixels, in order.
        self.abstained: List[List[Tuple[int, int]]] = [[] for _ in cells]

    def run(self) -> Dict[str, Dict]:
        """Certify the images; return ``{cell key: metrics}``."""
        self.runner.call_hook('before_test')
        self.runner.call_hook('before_test_epoch')
        self.runner.model.eval()
        for idx, data_batch in enumerate(self.dataloader):
            self.run_iter(idx, data_batch)
        grid, results = self.runner.test_loop, {}
        size = len(self.dataloader.dataset)
        for cell, evaluator, counts in zip(self.cells, self.evaluators,
                                           self.abstained):
            metrics = evaluator.evaluate(size)
            metrics.update(
                abstain=abstain_rate(counts, size), radius=cell.radius)
            if grid is not self:
                grid.cell, grid.evaluator = cell, evaluator
            self.runner.call_hook('after_test_epoch', metrics=metrics)
            results[cell.key] = metrics
        self.runner.call_hook('after_test')
        return results

    @torch.no_grad()
    def run_iter(self, idx, data_batch: Dict) -> None:
        """Certify one batch's images and evaluate each cell's labels."""
        self.runner.call_hook(
            'before_test_iter', batch_idx=idx, data_batch=data_batch)
        model = self.runner.model
        model = model.module if is_model_wrapper(model) else model
        samples = data_batch['data_samples']
        root = getattr(self.dataloader.dataset, 'data_root', None)
        outputs: List[List] = [[] for _ in self.cells]
        with autocast(enabled=self.fp16):
            for image, sample, key in zip(data_batch['inputs'], samples,
                                          sample_keys(samples, root)):
                for i, labels in enumerate(
                        certify_image(model, image, sample, key, self.cells)):
                    outputs[i].append(self.certified_sample(sample, labels))
                    self.abstained[i].append((int(
                        (labels == ABSTAIN).sum()), labels.numel()))
        for evaluator, out in zip(self.evaluators, outputs):
            evaluator.process(data_samples=out, data_batch=data_batch)
        self.runner.call_hook(
            'after_test_iter',
            batch_idx=idx,
            data_batch=data_batch,
            outputs=outputs[0])

    @staticmethod
    def certified_sample(sample, labels: Tensor) -> SegDataSample:
        """A data sample with ``sample``'s metainfo and ground truth and the
        certified labels as its ``pred_sem_seg`` (on the CPU, as the
        dataloader's ground truth: the model's device may be another)."""
        out = SegDataSample(metainfo=dict(sample.metainfo))
        if 'gt_sem_seg' in sample:
            out.gt_sem_seg = sample.gt_sem_seg
        out.pred_sem_seg = PixelData(data=labels[None].cpu())
        return out


def abstain_rate(counts: List[Tuple[int, int]], size: int) -> float:
    """The fraction of abstaining pixels over the dataset's ``size``
    images, from every process's ``(abstaining, pixels)`` per image
    (gathered in order as the evaluator gathers its results, the images a
    sampler repeats to even out the processes dropped)."""
    found = collect_results(counts, size)
    rate = [None]
    if found is not None:
        rate = [sum(a for a, _ in found) / max(sum(p for _, p in found), 1)]
    broadcast_object_list(rate)
    return rate[0]


def draw_groups(cells: Sequence) -> List[Tuple[int, int]]:
    """``(start, stop)`` of each run of consecutive
    :class:`Certification` cells that share their draws (one loop each);
    other cells are runs of one."""
    groups: List[Tuple[int, int]] = []
    for i, cell in enumerate(cells):
        prev = cells[i - 1] if i else None
        if groups and isinstance(cell, Certification) and isinstance(
                prev, Certification) and prev.draws == cell.draws:
            groups[-1] = (groups[-1][0], i + 1)
        else:
            groups.append((i, i + 1))
    return groups
