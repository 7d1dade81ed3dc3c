"""Train configs on several seeds and compare them (``make compare``).

    python tools/compare_seeds.py CONFIG [CONFIG ...] [--names ...] \\
        [--seeds 0 1 2] [--work-dir work_dirs/compare] [--cfg-options ...]

Runs that finished before are kept, interrupted ones resume; see
:mod:`mmseg_elliptical.demo.compare`.
"""
from mmseg_elliptical.demo.compare import main

if __name__ == '__main__':
    main()
