"""The demo's end-of-run summary, per-class metric and seed comparison."""
from .metric import PerClassIoUMetric
from .summary import SegSummaryHook

__all__ = ['PerClassIoUMetric', 'SegSummaryHook']
