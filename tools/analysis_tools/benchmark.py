#!/usr/bin/env python
"""Benchmark elliptical backbones against their dot-product baselines.

For every config, the elliptical model and its baselines are derived
(``mmseg_elliptical.benchmark.models``): ``fused-dot`` (the same config with
``elliptical_layers=[]``), ``mmseg-dot`` (mmseg's own class) and, with
``--roles``, ``paper-ref`` (the explicit path). All models are measured in
one process, interleaved round by round; the report gives parameters,
FLOPs, time per step (inference, training step), memory and the ratios of
elliptical to each baseline. Writes ``benchmark.{json,md,csv,png}``.

Example::

    # ViT-T 512, batch 1
    python tools/analysis_tools/benchmark.py
    python tools/analysis_tools/benchmark.py \\
        mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py
    # onnxruntime next to PyTorch eager (the elliptical model, inference)
    python tools/analysis_tools/benchmark.py --onnxruntime --roles elliptical
    # one attention layer
    python tools/analysis_tools/benchmark.py --layer
    # one table of several runs
    python tools/analysis_tools/benchmark.py --overview \\
        work_dirs/speed/vit-t_b1 work_dirs/speed/mit-b0 \\
        --out-dir work_dirs/speed
"""
import argparse
import dataclasses
import json
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence, Union

import torch
from mmengine.config import DictAction
from mmengine.utils import ProgressBar

from mmseg_elliptical.benchmark import (DEFAULT_ROLES, ROLES, BenchmarkOptions,
                                        BenchModel, derive_variants,
                                        layer_benchmark, layer_markdown,
                                        run_benchmark)
from mmseg_elliptical.benchmark.models import supported_backbones
from mmseg_elliptical.benchmark.report import (csv_table, figure, markdown,
                                               overview_table)
from mmseg_elliptical.utils import load_config, model_names, write_report

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIG = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument(
        'configs',
        nargs='*',
        default=[DEFAULT_CONFIG],
        help='config files ("mmseg::" paths allowed); default: '
        'Segmenter ViT-T')
    p.add_argument('--names', nargs='+', help='one name per config')
    p.add_argument(
        '--roles',
        nargs='+',
        choices=ROLES,
        default=list(DEFAULT_ROLES),
        help='variants of each config to measure')
    p.add_argument(
        '--whole-model',
        action='store_true',
        help='time the segmentor (mode="tensor"), not the '
        'backbone')
    p.add_argument(
        '--sizes',
        type=int,
        nargs='+',
        default=[512],
        help='square input sizes (inference)')
    p.add_argument(
        '--train-sizes',
        type=int,
        nargs='*',
        default=None,
        help='sizes with a training step (default: --sizes)')
    p.add_argument(
        '--flops-sizes',
        type=int,
        nargs='*',
        default=None,
        help='sizes at which FLOPs are counted (default: --sizes)')
    p.add_argument('--batch-size', type=int, default=1)
    p.add_argument(
        '--rounds', type=int, default=10, help='interleaved timing rounds')
    p.add_argument(
        '--min-run-time',
        type=float,
        default=0.,
        help='timed seconds per model and round (0: one step)')
    p.add_argument(
        '--warmup',
        type=int,
        default=1,
        help='untimed steps per model and (size, mode)')
    p.add_argument('--device', default='cpu')
    p.add_argument('--amp', action='store_true', help='bf16 autocast')
    p.add_argument(
        '--compile',
        action='store_true',
        help='run each model under torch.compile')
    p.add_argument(
        '--compile-backend',
        default='inductor',
        help='torch.compile backend (default inductor)')
    p.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch threads (0: torch\'s default). 1 by default: '
        'on a shared CPU, threads waiting for each other make '
        'timings erratic')
    p.add_argument(
        '--clock',
        choices=['wall', 'process'],
        default='wall',
        help='wall-clock, or process CPU time (CPU only)')
    p.add_argument(
        '--memory',
        choices=['inline', 'child', 'tensors', 'none'],
        default='inline',
        help='CPU peak memory of one step: RSS increase in this '
        'process after the timing (inline) or in a fresh child '
        'process per measurement (slower, isolated), or the peak '
        'of tensor memory (exact, repeatable). CUDA: '
        'max_memory_allocated')
    p.add_argument(
        '--saved-tensors',
        action='store_true',
        help='also measure the tensors a training forward saves '
        'for the backward')
    p.add_argument(
        '--layer',
        nargs='*',
        type=int,
        metavar='N',
        help='run the per-layer micro-benchmark instead: one '
        'attention of TOKENS DIMS HEADS (default 1025 192 3)')
    p.add_argument(
        '--overview',
        nargs='+',
        metavar='DIR',
        help='measure nothing: one table of the benchmark.json '
        'in each DIR (earlier runs), into OUT_DIR/overview.md')
    p.add_argument(
        '--onnxruntime',
        action='store_true',
        help='also time each elliptical model exported to ONNX and run by '
        'onnxruntime (inference, CPU; needs the deploy extra)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out-dir', default='work_dirs/benchmark')
    p.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='overrides of every config, e.g. '
        'model.backbone.num_layers=2')
    args = p.parse_args(argv)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        p.error('--device cuda, but torch sees no GPU')
    if args.clock == 'process' and args.device != 'cpu':
        p.error('--clock process measures CPU time: use it with --device cpu')
    if args.onnxruntime and args.device != 'cpu':
        p.error('--onnxruntime runs on the CPU: use it with --device cpu')
    if args.layer is not None and len(args.layer) not in (0, 3):
        p.error('--layer takes TOKENS DIMS HEADS, or nothing')
    args.train_sizes = args.sizes if args.train_sizes is None \
        else args.train_sizes
    args.flops_sizes = args.sizes if args.flops_sizes is None \
        else args.flops_sizes
    if set(args.train_sizes) - set(args.sizes):
        p.error('--train-sizes must be among --sizes')
    return args


def run_layer(args: argparse.Namespace) -> Dict:
    """The per-layer micro-benchmark; writes ``layer.{json,md}``."""
    tokens, dims, heads = args.layer or (1025, 192, 3)
    report = layer_benchmark(tokens, dims, heads, args.batch_size, args.rounds,
                             args.min_run_time, args.threads, args.clock,
                             args.device, args.seed)
    text = layer_markdown(report)
    write_report(args.out_dir, 'layer', data=report, markdown=text)
    print(text)
    return report


def run_overview(args: argparse.Namespace) -> str:
    """One table of earlier runs; writes ``overview.md``."""
    reports = []
    for folder in args.overview:
        with open(osp.join(folder, 'benchmark.json')) as f:
            reports.append(json.load(f))
    text = overview_table(reports)
    write_report(args.out_dir, 'overview', markdown=text)
    print(text)
    return text


def model_list(args: argparse.Namespace) -> List[BenchModel]:
    """The models of every config: the derived variants, or the model."""
    specs = []
    names = model_names(args.configs, args.names)
    for name, config in zip(names, args.configs):
        cfg = load_config(config, args.cfg_options, no_pretrained=True)
        variants = derive_variants(name, config, cfg.model.to_dict(),
                                   args.roles, args.whole_model)
        if variants[0].role == 'model':
            print(f'{name}: {cfg.model.backbone.type} has no elliptical '
                  f'version (supported: {", ".join(supported_backbones())})'
                  '; measured as it is.')
        if len(names) > 1:
            variants = [
                dataclasses.replace(v, name=f'{name}/{v.role}')
                if v.role != 'model' else v for v in variants
            ]
        specs += variants
    return specs


def main(argv: Optional[Sequence[str]] = None) -> Union[Dict, str]:
    """Run the benchmark; return the report (as in ``benchmark.json``), or
    the overview's markdown."""
    args = parse_args(argv)
    if args.overview:
        return run_overview(args)
    if args.layer is not None:
        return run_layer(args)
    specs = model_list(args)
    options = BenchmarkOptions(
        sizes=args.sizes,
        train_sizes=args.train_sizes,
        batch_size=args.batch_size,
        rounds=args.rounds,
        min_run_time=args.min_run_time,
        warmup=args.warmup,
        device=args.device,
        amp=args.amp,
        compile=args.compile_backend if args.compile else None,
        threads=args.threads,
        clock=args.clock,
        memory=args.memory,
        saved_tensors=args.saved_tensors,
        flops_sizes=args.flops_sizes,
        seed=args.seed,
        onnxruntime=args.onnxruntime)
    print('Models: ' + ', '.join(s.name for s in specs))
    bar = ProgressBar(len(options.groups()) * len(specs) * args.rounds)
    report = run_benchmark(specs, options, bar.update)
    report['meta']['command'] = ' '.join([
        'python tools/analysis_tools/benchmark.py',
        *(sys.argv[1:] if argv is None else argv)
    ])
    text = markdown(report)
    files = write_report(
        args.out_dir,
        'benchmark',
        data=report,
        markdown=text,
        table=csv_table(report),
        figure=figure(report))
    print(f'\n{text}\nWrote {", ".join(files)}')
    return report


if __name__ == '__main__':
    main()
