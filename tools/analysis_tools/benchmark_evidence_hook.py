"""What EllipticalEvidenceHook costs a training run: the run without and
with it, side by side.

Trains CONFIG twice in this process, first without the hook, then with it
(its defaults, or ``--interval`` / ``--image-interval`` / ``--num-images``),
each in its own work dir under ``--work-dir``, and prints the wall time of
each run, their ratio, and the seconds spent inside the hook over the
hooked run's time (the hook's own share, which another process competing
for the cores does not blur).

Example (the demo, see docs/evidence.md)::

    OMP_NUM_THREADS=1 python tools/analysis_tools/benchmark_evidence_hook.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os.path as osp
import time
from typing import Dict, Optional, Sequence

from mmseg_elliptical.utils import load_config, markdown_table
from mmseg_elliptical.utils.arguments import (add_cfg_options, add_work_dir,
                                              config_file, positive_int,
                                              tool_main)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0], usage='%(prog)s CONFIG [options]')
    p.add_argument('config', type=config_file)
    p.add_argument('--interval', type=positive_int)
    p.add_argument('--image-interval', type=positive_int)
    p.add_argument('--num-images', type=positive_int)
    add_work_dir(p, 'work_dirs/benchmark_evidence_hook', old=())
    add_cfg_options(p)
    return p.parse_args(argv)


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict[str, float]]:
    """Run both trainings and print the table; return its numbers."""
    args = parse_args(argv)
    if check_only:
        return None
    from mmengine.runner import Runner

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.engine import EllipticalEvidenceHook
    hook = dict(type='EllipticalEvidenceHook')
    for key in ('interval', 'image_interval', 'num_images'):
        if getattr(args, key) is not None:
            hook[key] = getattr(args, key)
    times = []  # (seconds, seconds inside the hook or None) per training
    for name, added in (('without_hook', None), ('with_hook', hook)):
        cfg = load_config(args.config, args.cfg_options)
        cfg.work_dir = osp.join(args.work_dir, name)
        cfg.experiment_name = f'benchmark_evidence_hook_{name}'
        cfg.visualizer.name = cfg.experiment_name  # a new one, not the last
        cfg.custom_hooks = [
            h for h in cfg.get('custom_hooks', [])
            if h['type'] != 'EllipticalEvidenceHook'
        ] + ([added] if added else [])
        runner = Runner.from_cfg(cfg)
        start = time.perf_counter()
        runner.train()
        inside = [
            h.seconds for h in runner.hooks
            if isinstance(h, EllipticalEvidenceHook)
        ]
        times.append(
            (time.perf_counter() - start, inside[0] if inside else None))
    (without, _), (with_hook, inside) = times
    out = dict(
        without=without,
        with_hook=with_hook,
        ratio=with_hook / without,
        inside=inside,
        share=inside / (with_hook - inside))
    print(
        markdown_table([
            'training', 'without the hook (s)', 'with the hook (s)',
            'with / without', 'inside the hook (s)',
            'inside / the rest of the run'
        ], [[
            osp.basename(args.config), f'{without:.1f}', f'{with_hook:.1f}',
            f'{out["ratio"]:.3f}', f'{inside:.2f}',
            f'{100 * out["share"]:.2f} %'
        ]]))
    print(f'Hook: {hook}')
    return out


if __name__ == '__main__':
    main()
