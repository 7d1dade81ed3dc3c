from .metrics import PerClassIoUMetric

__all__ = ['PerClassIoUMetric']
