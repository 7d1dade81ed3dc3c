"""Train a segmentor: mmseg's own `tools/train.py`, mmseg-elliptical loaded.

Every flag of mmseg's script works unchanged; see `python tools/train.py -h`.
"""
from mmseg_elliptical.engine import run_mmseg_tool

if __name__ == '__main__':
    run_mmseg_tool('train.py')
