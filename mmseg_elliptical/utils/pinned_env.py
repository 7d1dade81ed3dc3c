"""The environment that makes a CPU training identical on every x86-64 host
with AVX2 (docs/demo.md, "One number on every host"): one thread, and the
same kernels whatever the CPU has beyond AVX2.

Measured on the demo (50 iterations, loss by loss): each of these settings
alone changes the loss sequence, torch's thread count (from the second
iteration: the backward's reductions split by thread), ATen's CPU
capability, MKL's code path (both from the first) and oneDNN's ISA (from the
second); the demo data's generation does not depend on any of them.

The Makefile's demo targets read it (``python pinned_env.py THREADS``
prints the assignments; run by path, it imports nothing of the package),
and a tool that starts trainings passes :func:`pinned_env` to them. It is
read when torch starts: set it in the environment of a new process.
"""
import os
import sys
from typing import Dict, Mapping, Optional

#: The variables pinned, beside the thread counts.
KERNELS = {
    'ATEN_CPU_CAPABILITY': 'avx2',  # ATen's vectorised kernels
    'MKL_CBWR': 'COMPATIBLE',  # MKL's GEMMs: one path on Intel and AMD
    'ONEDNN_MAX_CPU_ISA': 'AVX2',  # oneDNN's convolutions and matmuls
}
#: The thread variables: OpenMP's (torch's intra-op threads) and MKL's.
THREAD_VARIABLES = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')


def pinned_env(env: Optional[Mapping[str, str]] = None,
               threads: int = 1) -> Dict[str, str]:
    """``env`` (default: this process's) with the kernels and threads
    pinned.

    Args:
        env (Mapping[str, str], optional): The environment to start from.
        threads (int): torch's threads. Only 1 gives the demo's numbers:
            with 2 the backward's reductions split otherwise.

    Returns:
        dict: The environment for a new process.
    """
    out = dict(os.environ if env is None else env)
    out.update(KERNELS)
    out.update({name: str(int(threads)) for name in THREAD_VARIABLES})
    return out


def assignments(threads: int = 1) -> str:
    """The pinned variables as ``NAME=value`` words for a shell or make."""
    pinned = pinned_env({}, threads)
    return ' '.join(f'{k}={v}' for k, v in pinned.items())


if __name__ == '__main__':
    print(assignments(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
