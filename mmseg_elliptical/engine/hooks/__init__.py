from .adversarial_training import AdversarialTrainingHook
from .evidence_hook import EllipticalEvidenceHook
from .seg_summary_hook import SegSummaryHook

__all__ = [
    'AdversarialTrainingHook', 'EllipticalEvidenceHook', 'SegSummaryHook'
]
