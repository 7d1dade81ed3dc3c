"""One elliptical attention layer timed on its paths, interleaved
(``tools/analysis_tools/benchmark_layer.py``)."""
import contextlib
from typing import Callable, Dict, Optional

import torch

from ..models import EllipticalAttention
from ..utils.output import markdown_table
from .timing import make_timer, paired_ratio, run_interleaved, time_stats


def layer_steps(tokens: int = 1025,
                dims: int = 192,
                heads: int = 3,
                batch_size: int = 1,
                device: str = 'cpu',
                seed: int = 0) -> Dict[str, Callable[[], torch.Tensor]]:
    """One attention layer and a step per path (the tool's docstring).

    Args:
        tokens (int): Tokens per image. Defaults to 1025 (ViT 512 x 512).
        dims (int): Embedding dims. Defaults to 192 (ViT-T).
        heads (int): Heads. Defaults to 3.
        batch_size (int): Images. Defaults to 1.
        device (str): Device. Defaults to ``'cpu'``.
        seed (int): Seed of weights and inputs.

    Returns:
        dict[str, callable]: A step per path, named as there, each
        returning the attention's output.
    """
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
