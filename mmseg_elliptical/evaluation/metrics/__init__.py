from .per_class_iou_metric import PerClassIoUMetric

__all__ = ['PerClassIoUMetric']
