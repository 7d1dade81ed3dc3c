"""Measure elliptical models against their dot-product baselines.

``tools/benchmark.py`` is the command line; this package does the work:
:mod:`.models` derives the variants of a config and builds them,
:mod:`.timing` times them interleaved with ``torch.utils.benchmark``,
:mod:`.memory` and :mod:`.flops` measure memory and complexity,
:mod:`.runner` puts it together, :mod:`.report` renders it and
:mod:`.layer` is the per-layer micro-benchmark.
"""
from .flops import count_flops, count_params
from .layer import layer_benchmark, layer_markdown
from .memory import (RssPeak, cuda_peak_mb, peak_rss_in_child,
                     saved_tensors_mb, step_peak_mb, tensor_peak_mb)
from .models import (DEFAULT_ROLES, ROLES, BenchModel, build_model,
                     derive_variants, elliptical_transformer, make_step)
from .runner import TARGETS, BenchmarkOptions, ratios, run_benchmark
from .timing import (RatioStats, make_timer, paired_ratio, run_interleaved,
                     summarise, verdict)

__all__ = [
    'count_flops', 'count_params', 'layer_benchmark', 'layer_markdown',
    'RssPeak', 'cuda_peak_mb', 'peak_rss_in_child', 'saved_tensors_mb',
    'step_peak_mb', 'tensor_peak_mb', 'DEFAULT_ROLES', 'ROLES', 'BenchModel',
    'build_model', 'derive_variants', 'elliptical_transformer', 'make_step',
    'TARGETS', 'BenchmarkOptions', 'ratios', 'run_benchmark', 'RatioStats',
    'make_timer', 'paired_ratio', 'run_interleaved', 'summarise', 'verdict'
]
