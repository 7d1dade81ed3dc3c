from .adversarial_training import AdversarialTrainingHook
from .evidence_hook import EllipticalEvidenceHook
from .noise_training import NoiseTrainingHook
from .seg_summary_hook import SegSummaryHook

__all__ = [
    'AdversarialTrainingHook', 'EllipticalEvidenceHook', 'NoiseTrainingHook',
    'SegSummaryHook'
]
