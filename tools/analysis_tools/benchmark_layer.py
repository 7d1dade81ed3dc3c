#!/usr/bin/env python
"""Time one elliptical attention layer on its paths, interleaved.

One :class:`~mmseg_elliptical.models.EllipticalAttention` (default: ViT-T's,
1025 tokens, 192 dims, 3 heads) in eval mode, timed interleaved on four paths,
each paired per round with the dot-product one. Writes ``layer.{json,md}``.

* ``dot-product``: outside a value chain: one qkv GEMM and fused attention;
* ``elliptical no-grad``: the inference path: one qkv GEMM, ``m`` estimated
  from the values, ``q *= m`` in place, fused attention;
* ``elliptical grad``: the training path, forced under
  ``torch.enable_grad()`` (parameters not requiring grad, so no graph is
  kept): k and v from one GEMM, q from a second one, then ``q * m``;
* ``elliptical explicit``: the paper's formulation, materialised
  probabilities (``fused_attn=False``), under no-grad.

Example::

    # ViT-T at 512: 1025 tokens, 192 dims, 3 heads
    python tools/analysis_tools/benchmark_layer.py --rounds 60 \\
        --min-run-time 0.2 --work-dir work_dirs/speed/layer
"""
__check_arguments_first__ = True  # the plugin registers once they pass

import argparse
import contextlib
from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence

from mmseg_elliptical.utils import write_report
from mmseg_elliptical.utils.arguments import (add_timing, add_work_dir,
                                              positive_int)
from mmseg_elliptical.utils.output import markdown_table

if TYPE_CHECKING:
    import torch


def layer_steps(tokens: int = 1025,
                dims: int = 192,
                heads: int = 3,
                batch_size: int = 1,
                device: str = 'cpu',
                seed: int = 0) -> Dict[str, Callable[[], 'torch.Tensor']]:
    """One attention layer and a step per path (see the module docstring).

    Args:
        tokens (int): Tokens per image. Defaults to 1025 (ViT 512 x 512).
        dims (int): Embedding dims. Defaults to 192 (ViT-T).
        heads (int): Heads. Defaults to 3.
        batch_size (int): Images. Defaults to 1.
        device (str): Device. Defaults to ``'cpu'``.
        seed (int): Seed of weights and inputs.

    Returns:
        dict[str, callable]: A step per path, named as in the module
        docstring, each returning the attention's output.
    """
    import torch

    from mmseg_elliptical.models import EllipticalAttention
    torch.manual_seed(seed)
    attn = EllipticalAttention(dims, heads).to(device).eval()
    attn.requires_grad_(False)
    x = torch.randn(batch_size, tokens, dims, device=device)
    v_prev = torch.randn(
        batch_size, heads, tokens, dims // heads, device=device)

    def run(v: Optional[torch.Tensor], grad: bool, fused: bool = True):

        def step() -> torch.Tensor:
            attn.fused_attn = fused
            chain = attn.chained(v) if v is not None else \
                contextlib.nullcontext()
            with torch.set_grad_enabled(grad), chain:
                return attn(x)

        return step

    return {
        'dot-product': run(None, grad=False),
        'elliptical no-grad': run(v_prev, grad=False),
        'elliptical grad': run(v_prev, grad=True),
        'elliptical explicit': run(v_prev, grad=False, fused=False),
    }


def layer_benchmark(tokens: int = 1025,
                    dims: int = 192,
                    heads: int = 3,
                    batch_size: int = 1,
                    rounds: int = 20,
                    min_run_time: float = 0.,
                    threads: int = 1,
                    clock: str = 'wall',
                    device: str = 'cpu',
                    seed: int = 0) -> Dict:
    """Time the paths of one attention layer, interleaved.

    Args:
        tokens, dims, heads, batch_size: See :func:`layer_steps`.
        rounds (int): Interleaved rounds. Defaults to 20.
        min_run_time (float): Seconds per path and round (0: one run).
        threads (int): torch threads. Defaults to 1.
        clock (str): ``'wall'`` or ``'process'``.
        device (str): Device. Defaults to ``'cpu'``.
        seed (int): Seed of weights, inputs and orders.

    Returns:
        dict: ``settings``, ``results`` (per path: times, median, IQR) and
        ``ratios`` (each path / dot-product, paired per round).
    """
    from mmseg_elliptical.benchmark.timing import (make_timer, paired_ratio,
                                                   run_interleaved, time_stats)
    steps = layer_steps(tokens, dims, heads, batch_size, device, seed)
    label = f'attention {tokens} tokens x {dims} dims, {heads} heads'
    timers = {
        name: make_timer(step, label, name, '', threads, clock)
        for name, step in steps.items()
    }
    for step in steps.values():
        step()
    rounds_ = run_interleaved(timers, rounds, min_run_time, seed)
    results = {n: time_stats(r, batch_size) for n, r in rounds_.items()}
    base = results['dot-product']['round_ms']
    ratios = {
        n: vars(paired_ratio(r['round_ms'], base))
        for n, r in results.items() if n != 'dot-product'
    }
    settings = dict(
        tokens=tokens,
        dims=dims,
        heads=heads,
        batch_size=batch_size,
        rounds=rounds,
        min_run_time=min_run_time,
        threads=threads,
        clock=clock,
        device=device)
    return dict(settings=settings, results=results, ratios=ratios)


def layer_markdown(report: Dict) -> str:
    """The micro-benchmark as a markdown table."""
    s = report['settings']
    base = report['results']['dot-product']['median_ms']
    rows = []
    for name, r in report['results'].items():
        ratio = report['ratios'].get(name)
        rows.append([
            name, r['median_ms'], r['iqr_ms'], r['median_ms'] - base, ratio
            and ratio['median'], ratio
            and f"{ratio['q1']:.3f}-{ratio['q3']:.3f}"
        ])
    head = (f"One attention layer: {s['tokens']} tokens, {s['dims']} dims, "
            f"{s['heads']} heads, batch {s['batch_size']}, {s['device']}, "
            f"{s['threads']} thread(s); {s['rounds']} interleaved rounds, "
            f"{s['clock']} clock. Ratios: median over rounds of path / "
            'dot-product, timed in the same round.\n\n')
    return head + markdown_table([
        'path', 'median ms', 'IQR ms', 'minus dot ms', 'ratio to dot',
        'ratio IQR'
    ], rows)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        usage='%(prog)s [TOKENS DIMS HEADS] [options]')
    p.add_argument(
        'shape',
        nargs='*',
        type=positive_int,
        metavar='N',
        help='TOKENS DIMS HEADS of the attention (default 1025 192 3)')
    add_timing(p, 20, 'path')
    add_work_dir(p, 'work_dirs/benchmark')
    args = p.parse_args(argv)
    if len(args.shape) not in (0, 3):
        p.error(f'argument N: {args.shape}: give TOKENS DIMS HEADS, or '
                'nothing')
    if args.shape and args.shape[1] % args.shape[2]:
        p.error(f'argument N: DIMS {args.shape[1]} is no multiple of HEADS '
                f'{args.shape[2]}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    """Time the layer; return the report (as in ``layer.json``)."""
    args = parse_args(argv)
    import mmseg_elliptical.plugin  # noqa: F401 (registers the plugin)
    tokens, dims, heads = args.shape or (1025, 192, 3)
    report = layer_benchmark(tokens, dims, heads, args.batch_size, args.rounds,
                             args.min_run_time, args.threads, args.clock,
                             args.device, args.seed)
    text = layer_markdown(report)
    files = write_report(args.work_dir, 'layer', data=report, markdown=text)
    print(f'{text}\nWrote {", ".join(files)}')
    return report


if __name__ == '__main__':
    main()
