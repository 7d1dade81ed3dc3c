"""mmseg's ``IoUMetric`` with the per-class IoU among its results."""
from typing import Dict, Optional, Tuple

import numpy as np
from mmseg.evaluation import IoUMetric
from mmseg.registry import METRICS


@METRICS.register_module()
class PerClassIoUMetric(IoUMetric):
    """``IoUMetric`` that also returns ``IoU.<class>`` (percent, as mmseg's
    table; NaN for a class absent from labels and predictions), so the log
    and the hooks get them.

    Args:
        keep_image_areas (bool): Keep the per-image intersection and union
            areas of every class as :attr:`image_areas` (main process; for a
            paired test over images) and the labelled pixels of every image
            as :attr:`image_labelled` (for a per-image pixel accuracy).
        **kwargs: ``IoUMetric``'s arguments.
    """

    def __init__(self, keep_image_areas: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keep_image_areas = keep_image_areas
        self.image_areas: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self.image_labelled: Optional[np.ndarray] = None

    def compute_metrics(self, results: list) -> Dict[str, float]:
        """Compute mmseg's metrics and add the per-class IoU.

        Args:
            results (list): The processed results of each image.

        Returns:
            Dict[str, float]: mmseg's metrics plus ``IoU.<class>``.
        """
        if self.keep_image_areas and results:
            self.image_areas = tuple(
                np.stack([np.asarray(r[i]) for r in results]).astype(np.int64)
                for i in (0, 1))
            self.image_labelled = np.array(
                [np.asarray(r[3]).sum() for r in results], dtype=np.int64)
        self._per_class = None
        metrics = super().compute_metrics(results)
        if self._per_class is not None and 'IoU' in self._per_class:
            names = self.dataset_meta['classes']
            for name, iou in zip(names, self._per_class['IoU']):
                metrics[f'IoU.{name}'] = float(np.round(iou * 100, 2))
        return metrics

    def total_area_to_metrics(self, *args, **kwargs) -> dict:
        """mmseg's computation; keeps the per-class values it returns."""
        self._per_class = IoUMetric.total_area_to_metrics(*args, **kwargs)
        return self._per_class
