"""Test a segmentor: mmseg's own `tools/test.py` with mmseg-elliptical loaded.

Every flag of mmseg's script works unchanged; see `python tools/test.py -h`.
"""
from mmseg_elliptical.engine import run_mmseg_tool

if __name__ == '__main__':
    run_mmseg_tool('test.py')
