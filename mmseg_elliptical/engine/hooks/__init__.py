from .evidence_hook import EllipticalEvidenceHook
from .seg_summary_hook import SegSummaryHook

__all__ = ['EllipticalEvidenceHook', 'SegSummaryHook']
