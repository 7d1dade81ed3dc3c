"""Representation collapse per layer: mean pairwise cosine of the tokens.

The measure is :mod:`mmseg_elliptical.analysis.collapse`'s: per layer (in
forward order across stages) and model, the mean cosine of pairs of the
layer's grid tokens (cls token, class embeddings left out) averaged over the
forwards of the config's test pipeline (one per image, or per crop in slide
mode), and the spread of the relevance ``m`` of elliptical layers. Outputs
(in ``--work-dir``): ``collapse.json``, ``collapse.md``, ``collapse.csv`` and
``collapse.png``. With ``--launcher pytorch`` (``tools/dist_launch.sh
analysis_tools/collapse.py N ...``) or ``slurm`` the images are split across
the processes and rank 0 writes the results.

Example (after ``make demo`` and ``make demo-dot``; see docs/evidence.md)::

    python tools/analysis_tools/collapse.py \\
        configs/demo/segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_elliptical/iter_3000.pth \\
        configs/demo/segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py \\
        work_dirs/demo_dot/iter_3000.pth \\
        --names elliptical dot-product --split val
"""  # noqa: E501
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import os
from typing import Dict, Optional, Sequence

from mmseg_elliptical.utils.arguments import (add_allow_partial,
                                              add_cfg_options, add_launcher,
                                              add_models, add_work_dir, device,
                                              launcher_of, models_of,
                                              positive_int, tool_main)
from mmseg_elliptical.utils.choices import PARTS
from mmseg_elliptical.utils.preflight import check_run


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line and check it before any work (adds
    ``specs``)."""
    parser = argparse.ArgumentParser(
        description='Mean pairwise cosine similarity of patch tokens per '
        'layer (representation collapse), models side by side.',
        usage='%(prog)s CONFIG CHECKPOINT [CONFIG CHECKPOINT ...] [options]')
    add_models(parser)
    parser.add_argument(
        '--split',
        default='test',
        choices=['train', 'val', 'test'],
        help='dataloader of the config to use (default test)')
    parser.add_argument(
        '--part',
        default='backbone',
        choices=PARTS,
        help='which transformer to measure')
    parser.add_argument(
        '--max-images', type=positive_int, help='use only the first N images')
    add_work_dir(parser, 'work_dirs/collapse')
    parser.add_argument('--device', type=device, default='cpu')
    add_cfg_options(parser)
    add_allow_partial(parser)
    add_launcher(parser)
    args = parser.parse_args(argv)
    args.specs = models_of(parser, args)
    check_run(parser, args, args.specs, __file__)
    args.parser = parser  # for the checks after the heavy imports
    return args


@tool_main
def main(argv: Optional[Sequence[str]] = None,
         check_only: bool = False) -> Optional[Dict[str, Dict]]:
    """Measure every model; return ``{name: per-layer results}`` (on rank
    0; None on the other processes). Arms of two or more runs
    (``--names``) add their mean +- sd per layer to ``collapse.md`` and
    ``collapse_arms.json``."""
    args = parse_args(argv)
    from mmengine.dist import is_main_process

    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    from mmseg_elliptical.analysis import measure_collapse
    from mmseg_elliptical.analysis.evidence.collapse import \
        write_collapse_report
    from mmseg_elliptical.engine import (checked_models, note_partial_loads,
                                         process_group)
    args.notes = checked_models(args)
    if check_only:
        return None
    with process_group(launcher_of(args)):
        results = {}
        for spec in args.specs:
            if is_main_process():
                print(f'{spec.name}:')
            results[spec.name] = measure_collapse(spec, args.split, args.part,
                                                  args.max_images,
                                                  args.cfg_options,
                                                  args.device)
        if not is_main_process():
            return None
        os.makedirs(args.work_dir, exist_ok=True)
        text = write_collapse_report(results, args.work_dir, args.part,
                                     args.arms)
        print(text +
              note_partial_loads(f'{args.work_dir}/collapse.md', args.notes))
        print(f'Results in {args.work_dir}/collapse.{{json,md,csv,png}}')
    return results


if __name__ == '__main__':
    main()
