from .seg_summary_hook import SegSummaryHook

__all__ = ['SegSummaryHook']
