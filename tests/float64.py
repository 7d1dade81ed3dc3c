"""Attacks and trainings compared with an oracle in float64 (issue 52).

An attack with sign steps and step-size halvings amplifies a rounding
difference: in float32 the package's batched forward and an oracle's
one-image forward round differently, and differently again on each kernel
path (``ATEN_CPU_CAPABILITY``, MKL, oneDNN), so a float32 comparison holds
on the CPU it was tuned on only. A float64 model still receives its images
in float32, as mmseg's preprocessor casts them (and the input gradients
cross that cast in float32); the oracles cast alike. Then L-inf images
agree exactly and L2 ones within 6e-9 levels on every kernel path
(docs/install.md, "Tests that hold on every CPU"), where a halving more or
less moves pixels by 1e-3 or more.
"""
import copy
from typing import Dict

#: The tolerance of a float64 comparison of images (0-255 levels).
ATOL = 1e-6


def model64(model):
    """A float64 copy of ``model`` (the original is left in float32)."""
    return copy.deepcopy(model).double()


def batch64(batch: Dict) -> Dict:
    """``batch`` with its images in float64 (samples shared)."""
    return dict(batch, inputs=[x.double() for x in batch['inputs']])
