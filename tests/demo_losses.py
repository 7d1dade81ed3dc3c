"""The demo's first training losses, bit for bit: the support module of
``tests/test_utils/test_pinned_env.py`` (which compares them with the
recorded ones within float noise, and two runs bit for bit) and the script
that recorded ``tests/demo_losses.json``::

    python tests/demo_losses.py tests/demo_losses.json [ITERATIONS]

run from the repository root; it starts itself again in the pinned
environment (:mod:`mmseg_elliptical.utils.pinned_env`), generates the demo
data in a temporary folder and trains ``make demo``'s config for
ITERATIONS (default 20) iterations, recording each iteration's loss as a
float's hex (bit for bit). With ``--here`` it trains in this process as it
is (what the pinned child runs).
"""
import json
import os
import os.path as osp
import platform
import subprocess
import sys
import tempfile
from typing import Dict, List

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO = osp.join(
    ROOT, 'configs', 'demo',
    'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py')
ITERATIONS = 20


def train_here(iterations: int, work_dir: str) -> List[str]:
    """Train the demo for ``iterations`` in this process; each iteration's
    loss as ``float.hex``."""
    from mmengine.config import Config
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    import mmseg_elliptical  # noqa: F401

    losses: List[str] = []

    class Record(Hook):

        def after_train_iter(self,
                             runner,
                             batch_idx,
                             data_batch=None,
                             outputs=None):
            losses.append(float(outputs['loss'].detach()).hex())

    cfg = Config.fromfile(DEMO)
    root = osp.join(work_dir, 'demo_shapes')
    for split in ('train', 'val', 'test'):
        cfg[f'{split}_dataloader'].dataset.data_root = root
    cfg.merge_from_dict({
        'work_dir': work_dir,
        'log_level': 'WARNING',
        'train_cfg.max_iters': iterations,
        'train_cfg.val_interval': iterations + 1,
        'default_hooks.checkpoint': None,
        'custom_hooks': [],
    })
    runner = Runner.from_cfg(cfg)
    runner.register_hook(Record())
    runner.train()
    return losses


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the machine type."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def pinned_losses(iterations: int = ITERATIONS) -> Dict:
    """The losses of the first ``iterations`` trained in a new process in
    the pinned environment, with the settings it ran under."""
    from mmseg_elliptical.utils.pinned_env import pinned_env
    env = pinned_env()
    env['PYTHONPATH'] = os.pathsep.join(
        [ROOT] + [p for p in [env.get('PYTHONPATH')] if p])
    with tempfile.TemporaryDirectory() as tmp:
        out = osp.join(tmp, 'losses.json')
        proc = subprocess.run(
            [sys.executable, __file__, out,
             str(iterations), '--here'],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900)
        if proc.returncode:
            raise RuntimeError(f'the pinned demo run failed:\n'
                               f'{proc.stderr[-3000:]}')
        with open(out) as f:
            return json.load(f)


def main(argv: List[str]) -> None:
    out = argv[0]
    iterations = int(argv[1]) if len(argv) > 1 else ITERATIONS
    if '--here' not in argv:
        record = pinned_losses(iterations)
        record['how'] = (
            'python tests/demo_losses.py tests/demo_losses.json '
            f'{iterations} (make demo\'s config, its first {iterations} '
            'iterations, in the environment of '
            'mmseg_elliptical/utils/pinned_env.py; losses as float.hex)')
        with open(out, 'w') as f:
            json.dump(record, f, indent=1)
        return
    import torch

    from mmseg_elliptical.utils.pinned_env import KERNELS, THREAD_VARIABLES
    with tempfile.TemporaryDirectory() as tmp:
        losses = train_here(iterations, tmp)
    record = dict(
        iterations=iterations,
        settings={k: os.environ.get(k)
                  for k in (*KERNELS, *THREAD_VARIABLES)},
        recorded_on=dict(
            cpu=cpu_name(),
            capability=torch.backends.cpu.get_cpu_capability(),
            torch=torch.__version__),
        losses=losses)
    with open(out, 'w') as f:
        json.dump(record, f, indent=1)


if __name__ == '__main__':
    main(sys.argv[1:])
