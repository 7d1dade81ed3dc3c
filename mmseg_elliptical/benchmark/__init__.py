"""Measure elliptical models against their dot-product baselines; the
tools under ``tools/analysis_tools/benchmark*.py`` are the command lines."""
from .flops import count_flops, count_params
from .memory import (cuda_peak_mb, saved_tensors_mb, step_peak_mb,
                     tensor_peak_mb)
from .runner import MEMORY, BenchmarkOptions, ratios, run_benchmark
from .timing import (RatioStats, make_timer, paired_ratio, run_interleaved,
                     time_stats)
from .variants import (DEFAULT_ROLES, ROLES, BenchForward, BenchModel,
                       build_model, config_variants, derive_variants,
                       make_step)

__all__ = [
    'count_flops', 'count_params', 'cuda_peak_mb', 'saved_tensors_mb',
    'step_peak_mb', 'tensor_peak_mb', 'DEFAULT_ROLES', 'ROLES', 'BenchForward',
    'BenchModel', 'build_model', 'config_variants', 'derive_variants',
    'make_step', 'MEMORY', 'BenchmarkOptions', 'ratios', 'run_benchmark',
    'RatioStats', 'make_timer', 'paired_ratio', 'run_interleaved', 'time_stats'
]
