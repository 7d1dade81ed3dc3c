#!/usr/bin/env python
"""Benchmark elliptical vs dot-product backbones side by side.

Every model is built from a config file and measured in ONE process, the
models interleaved rep by rep after a warm-up, so load from other processes
hits all of them alike. For each input size it reports parameters, FLOPs,
the latency of inference (``no_grad``, eval) and of a training step
(forward + backward of the sum of the outputs; no optimizer, which costs the
same for models with the same parameters), images/s and the peak memory.

Models (the first is the subject, every ratio is ``subject / other``):

* ``elliptical``: the first config (default: Segmenter ViT-T, elliptical).
* ``mmseg-dot``: the further configs (default: mmseg's dot-product twin,
  whose attention is ``nn.MultiheadAttention`` with ``need_weights=True``,
  i.e. it materialises the N x N attention weights).
* ``fused-dot`` (``--fused-baseline``, on by default): the first config with
  ``elliptical_layers=[]``: the same code with fused dot-product attention,
  the fair baseline of the elliptical overhead.
* ``paper-ref`` (``--paper-reference``): the first config with the paper's
  formulation written in plain torch (``q @ diag_embed(m)``, materialised
  N x N scores), showing what the fused path gains.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` minus the
allocation before the step. On the CPU the peak RSS increase of one step:
the freed heap is given back to the OS (``malloc_trim``), the kernel's RSS
high-water mark is reset (``/proc/self/clear_refs``) and ``VmHWM - VmRSS``
around the step is reported (``ru_maxrss`` delta where the mark cannot be
reset). ``--memory inline`` (default) does it on the last timed rep of each
model; ``--memory child`` in a fresh child process (forkserver) per (model,
size, mode), isolated from the other models' heap but slower; ``none`` skips
it.

Example::

    python tools/benchmark.py                        # defaults, < 5 min
    python tools/benchmark.py --paper-reference --sizes 512 --train-sizes 512
"""
import argparse
import ctypes
import gc
import json
import math
import multiprocessing as mp
import os
import os.path as osp
import platform
import random
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape
from mmengine.config import Config, ConfigDict, DictAction
from mmengine.hub import get_config
from mmengine.utils import ProgressBar, mkdir_or_exist

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
ELLIPTICAL_CFG = osp.join(
    ROOT, 'configs', 'segmenter',
    'segmenter_elliptical-vit-t_mask_8xb1-160k_ade20k-512x512.py')
DOT_CFG = 'mmseg::segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'
MODES = ('infer', 'train')
MB = 2**20


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line.

    Args:
        argv (Sequence[str], optional): Arguments; ``sys.argv[1:]`` if None.

    Returns:
        argparse.Namespace: The options.
    """
    parser = argparse.ArgumentParser(
        description='Benchmark elliptical vs dot-product backbones: '
        'params, FLOPs, latency (inference, train step) and peak memory.')
    parser.add_argument(
        'configs',
        nargs='*',
        default=[ELLIPTICAL_CFG, DOT_CFG],
        help='config files; the first is the subject (elliptical), the '
        'others baselines. "mmseg::" paths are resolved by mmengine.')
    parser.add_argument(
        '--names', nargs='+', help='display names of the configs')
    parser.add_argument(
        '--no-fused-baseline',
        dest='fused_baseline',
        action='store_false',
        help='do not add the first config with elliptical_layers=[] '
        '(fused dot-product baseline)')
    parser.add_argument(
        '--paper-reference',
        action='store_true',
        help='add the paper formulation (materialised N x N scores, '
        'q @ diag_embed(m)) of the first config')
    parser.add_argument(
        '--whole-model',
        action='store_true',
        help='benchmark the whole segmentor (backbone + decode head, '
        'mode="tensor") instead of the backbone')
    parser.add_argument(
        '--sizes',
        type=int,
        nargs='+',
        default=[256, 512, 768, 1024],
        help='square input sizes (inference)')
    parser.add_argument(
        '--train-sizes',
        type=int,
        nargs='*',
        default=[256, 512],
        help='sizes at which a training step is measured as well')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument(
        '--reps', type=int, default=3, help='timed reps per model')
    parser.add_argument(
        '--warmup', type=int, default=1, help='untimed reps per model')
    parser.add_argument(
        '--memory',
        choices=['inline', 'child', 'none'],
        default='inline',
        help='CPU peak memory (peak RSS increase of one step): inline = on '
        'the last timed rep, after giving freed heap back to the OS; child = '
        'in a fresh child process per (model, size, mode), slower, '
        'isolated; none. CUDA always uses max_memory_allocated')
    parser.add_argument(
        '--saved-activations',
        action='store_true',
        help='also report the tensors a training forward saves for the '
        'backward (unique storages, parameters excluded): a deterministic '
        'memory measure, one extra forward per model and train size')
    parser.add_argument(
        '--flops-sizes',
        type=int,
        nargs='*',
        default=[512],
        help='sizes at which FLOPs are counted (a traced forward each)')
    parser.add_argument('--device', default='cpu', help='cpu or cuda')
    parser.add_argument(
        '--amp', action='store_true', help='bf16 autocast')
    parser.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch.set_num_threads; 0: torch\'s default. Defaults to 1: on '
        'a CPU shared with other processes, OpenMP threads that wait for '
        'each other make multi-threaded timings erratic, and the process CPU '
        'time is only the work done with one thread')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out-dir', default='work_dirs/benchmark')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='overrides applied to every model config, e.g. '
        'model.backbone.num_layers=2')
    args = parser.parse_args(argv)
    if args.names and len(args.names) != len(args.configs):
        parser.error('--names needs one name per config')
    unknown = set(args.train_sizes) - set(args.sizes)
    if unknown:
        parser.error(f'--train-sizes {sorted(unknown)} not in --sizes')
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        parser.error('--device cuda but no GPU is available')
    return args


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------
@dataclass
class ModelSpec:
    """What is needed to (re)build one benchmarked model, picklable.

    Args:
        name (str): Display name.
        role (str): ``subject``, ``mmseg-dot``, ``fused-dot``, ``paper-ref``
            or ``baseline``.
        config (str): The config file.
        model_cfg (dict): ``cfg.model`` with the overrides applied.
        paper_reference (bool): Swap the attention for the naive one.
        whole_model (bool): Benchmark the segmentor, not the backbone.
    """
    name: str
    role: str
    config: str
    model_cfg: dict
    paper_reference: bool = False
    whole_model: bool = False

    @property
    def patch_size(self) -> int:
        return int(self.model_cfg['backbone'].get('patch_size', 16))

    def tokens(self, size: int) -> int:
        """Number of backbone tokens of a ``size x size`` image."""
        cls = self.model_cfg['backbone'].get('with_cls_token', True)
        return (size // self.patch_size)**2 + int(bool(cls))


def load_model_cfg(path: str, options: Optional[dict],
                   extra: Optional[dict] = None) -> dict:
    """``cfg.model`` of a config file, without any pretrained download.

    Args:
        path (str): Config file (``mmseg::`` prefixes allowed).
        options (dict, optional): ``--cfg-options`` style overrides.
        extra (dict, optional): More overrides (applied last).

    Returns:
        dict: The model config as a plain dict.
    """
    cfg = get_config(path) if '::' in path else Config.fromfile(path)
    cfg.merge_from_dict({'model.pretrained': None, **(options or {}),
                         **(extra or {})})
    backbone = cfg.model.get('backbone', {})
    if isinstance(backbone.get('init_cfg'), dict) and \
            backbone.init_cfg.get('type') == 'Pretrained':
        backbone.init_cfg = None
    return cfg.model.to_dict()


def model_specs(args: argparse.Namespace) -> List[ModelSpec]:
    """The models to benchmark, the subject first.

    Args:
        args (argparse.Namespace): Parsed options.

    Returns:
        list[ModelSpec]: subject, baselines, [fused-dot], [paper-ref].
    """
    names = args.names or [
        'elliptical' if i == 0 else
        ('mmseg-dot' if len(args.configs) == 2 else f'baseline{i}')
        for i in range(len(args.configs))
    ]
    specs = []
    for i, (name, path) in enumerate(zip(names, args.configs)):
        role = 'subject' if i == 0 else (
            'mmseg-dot' if name == 'mmseg-dot' else 'baseline')
        specs.append(
            ModelSpec(name, role, path, load_model_cfg(path, args.cfg_options),
                      whole_model=args.whole_model))
    subject = args.configs[0]
    if args.fused_baseline or args.paper_reference:
        btype = specs[0].model_cfg['backbone']['type']
        if btype != 'EllipticalVisionTransformer':
            raise ValueError(
                '--fused-baseline/--paper-reference need an '
                'EllipticalVisionTransformer as the first config, got '
                f'{btype}; pass --no-fused-baseline.')
    if args.fused_baseline:
        specs.append(
            ModelSpec(
                'fused-dot', 'fused-dot', subject,
                load_model_cfg(subject, args.cfg_options,
                               {'model.backbone.elliptical_layers': []}),
                whole_model=args.whole_model))
    if args.paper_reference:
        specs.append(
            ModelSpec('paper-ref', 'paper-ref', subject,
                      specs[0].model_cfg, paper_reference=True,
                      whole_model=args.whole_model))
    return specs


def use_paper_attention(model: nn.Module) -> int:
    """Put every elliptical attention on its explicit path (the paper's
    formulation: ``q * m`` and materialised N x N probabilities).

    Args:
        model (nn.Module): A model with elliptical attention modules.

    Returns:
        int: Number of modules switched.
    """
    from mmseg_elliptical.models import EllipticalAttentionMixin
    count = 0
    for module in model.modules():
        if isinstance(module, EllipticalAttentionMixin):
            module.fused_attn = False
            count += 1
    return count


def build_model(spec: ModelSpec, device: str, seed: int) -> nn.Module:
    """Build the benchmarked module (backbone or segmentor) in eval mode.

    Args:
        spec (ModelSpec): The model.
        device (str): Device.
        seed (int): Seed (same initial weights for every model).

    Returns:
        nn.Module: The module.
    """
    import mmseg_elliptical  # noqa: F401  (registers the plugin)
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    torch.manual_seed(seed)
    segmentor = MODELS.build(ConfigDict(spec.model_cfg))
    model = segmentor if spec.whole_model else segmentor.backbone
    if spec.paper_reference and not use_paper_attention(model):
        raise ValueError(f'{spec.name}: no EllipticalAttention to replace')
    model.to(device)
    model.eval()  # mmseg's ViT.train() returns None: no chaining
    return model


def run_forward(model: nn.Module, x: torch.Tensor, whole: bool):
    """Forward of a backbone or of a segmentor (``mode='tensor'``)."""
    return model(x, mode='tensor') if whole else model(x)


def output_sum(out) -> torch.Tensor:
    """Sum of every tensor in a (nested) model output, as a scalar loss."""
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    return sum(output_sum(o) for o in out)


def make_step(model: nn.Module, x: torch.Tensor, mode: str, whole: bool,
              amp: bool) -> Callable[[], None]:
    """A callable that runs one inference or one training step.

    Args:
        model (nn.Module): The module.
        x (Tensor): Input batch.
        mode (str): ``'infer'`` (eval, no_grad) or ``'train'`` (train mode,
            forward + backward of the output sum; grads reset before).
        whole (bool): Whether ``model`` is a segmentor.
        amp (bool): bf16 autocast.

    Returns:
        Callable[[], None]: The step.
    """
    autocast = torch.autocast(x.device.type, torch.bfloat16, enabled=amp)

    def infer() -> None:
        with torch.no_grad(), autocast:
            run_forward(model, x, whole)

    def train() -> None:
        model.zero_grad(set_to_none=True)
        with autocast:
            loss = output_sum(run_forward(model, x, whole))
        loss.backward()

    return infer if mode == 'infer' else train


def set_mode(model: nn.Module, mode: str) -> None:
    """eval for inference, train for a training step."""
    model.train(mode == 'train')


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------
def count_params(model: nn.Module) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def sdpa_flop_jit(inputs: list, outputs: list) -> int:
    """Multiply-adds of ``scaled_dot_product_attention``: QK^T and PV."""
    q, k, v = (get_shape(t) for t in inputs[:3])
    batch = int(np.prod(q[:-2]))
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


def baddbmm_flop_jit(inputs: list, outputs: list) -> int:
    """Multiply-adds of ``baddbmm`` (the bias add is not counted)."""
    b1, b2 = get_shape(inputs[1]), get_shape(inputs[2])
    return int(np.prod(b1)) * b2[-1]


def count_flops(model: nn.Module, x: torch.Tensor,
                whole: bool) -> Tuple[int, Dict[str, int]]:
    """FLOPs (1 multiply-add = 1, mmengine's convention) of one forward.

    mmengine's ``FlopAnalyzer`` (what ``get_model_complexity_info`` uses) has
    no handle for ``aten::scaled_dot_product_attention`` nor ``baddbmm``: it
    would skip the two N x N matmuls of fused attention. They are added
    here from the traced shapes (``B H N N (d + d_v)`` per call).

    Args:
        model (nn.Module): The module (eval mode).
        x (Tensor): Input batch.
        whole (bool): Whether ``model`` is a segmentor.

    Returns:
        tuple[int, dict]: Total and the ops still uncounted (name: calls).
    """

    class Wrapper(nn.Module):

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, inputs):
            return run_forward(self.model, inputs, whole)

    with torch.no_grad():
        analyzer = FlopAnalyzer(Wrapper(), (x, ))
        analyzer.set_op_handle('aten::scaled_dot_product_attention',
                               sdpa_flop_jit, 'aten::baddbmm',
                               baddbmm_flop_jit)
        analyzer.unsupported_ops_warnings(False)
        analyzer.uncalled_modules_warnings(False)
        analyzer.tracer_warnings('none')
        total = analyzer.total()
        unsupported = dict(analyzer.unsupported_ops())
    return int(total), unsupported


def saved_activations_mb(model: nn.Module, x: torch.Tensor, whole: bool,
                         amp: bool) -> float:
    """MiB of the tensors a training forward keeps for the backward.

    Counts each storage once (views share it) and leaves the parameters
    out; deterministic, unlike a peak RSS.

    Args:
        model (nn.Module): The module (put in train mode here).
        x (Tensor): Input batch.
        whole (bool): Whether ``model`` is a segmentor.
        amp (bool): bf16 autocast.

    Returns:
        float: MiB.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast(x.device.type, torch.bfloat16, enabled=amp):
        out = run_forward(model, x, whole)
    del out
    model.eval()
    return sum(storages.values()) / MB


def synchronize(device: str) -> None:
    """Wait for the device."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def time_step(step: Callable[[], None], device: str) -> Tuple[float, float]:
    """Wall-clock and process CPU seconds of one step.

    The CPU time of this process does not count the time other processes
    hold the cores, so on a shared machine it is the steadier of the two
    (with one thread; with more, OpenMP spin-waits count too).
    """
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def proc_status_kb(key: str) -> Optional[int]:
    """A ``kB`` field of ``/proc/self/status`` (Linux), or None."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_rss_peak() -> bool:
    """Reset the kernel's RSS high-water mark ``VmHWM`` (Linux >= 4.0)."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc), for a clean baseline."""
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_rss_mb(spec: ModelSpec, size: int, batch: int, mode: str,
                device: str, amp: bool, seed: int,
                threads: Optional[int]) -> Tuple[float, str]:
    """Peak RSS increase (MiB) of one step; meant for a fresh process.

    Builds the model, runs a warm-up step on a tiny input (thread pools,
    kernel caches), trims the heap, resets the RSS high-water mark and
    reports ``VmHWM`` minus the RSS before the step. Without a resettable
    mark it reports ``ru_maxrss`` minus the RSS before (an upper bound of the
    same quantity when the step is the largest thing the process did).

    Args:
        spec (ModelSpec): The model.
        size (int): Input size.
        batch (int): Batch size.
        mode (str): ``'infer'`` or ``'train'``.
        device (str): ``'cpu'``.
        amp (bool): bf16 autocast.
        seed (int): Seed.
        threads (int, optional): torch threads.

    Returns:
        tuple[float, str]: MiB and the measure used.
    """
    if threads:
        torch.set_num_threads(threads)
    model = build_model(spec, device, seed)
    set_mode(model, mode)
    tiny = 2 * spec.patch_size * (32 if spec.whole_model else 1)
    make_step(model, torch.randn(batch, 3, tiny, tiny), mode,
              spec.whole_model, amp)()
    model.zero_grad(set_to_none=True)
    x = torch.randn(batch, 3, size, size)
    step = make_step(model, x, mode, spec.whole_model, amp)
    with RssPeak() as peak:
        step()
    return peak.mb, peak.measure


def _child(queue, *args) -> None:
    """Child process entry: put ``peak_rss_mb(*args)`` or the error."""
    try:
        queue.put(peak_rss_mb(*args))
    except BaseException as e:  # report, do not hang the parent
        queue.put(e)


def peak_rss_in_child(ctx, *args) -> Tuple[float, str]:
    """Run :func:`peak_rss_mb` in a fresh child process."""
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, *args))
    proc.start()
    result = queue.get()
    proc.join()
    if isinstance(result, BaseException):
        raise result
    return result


class RssPeak:
    """Context manager: peak RSS increase (MiB) of what runs inside.

    Gives freed heap back to the OS, resets the kernel's high-water mark
    and reads ``VmHWM - VmRSS``; where the mark cannot be reset (not Linux)
    it falls back to ``ru_maxrss`` minus the RSS before.

    Attributes:
        mb (float): The increase, after the block.
        measure (str): ``'VmHWM'`` or ``'ru_maxrss'``.
    """

    def __enter__(self) -> 'RssPeak':
        trim_heap()
        self.before = proc_status_kb('VmRSS') or 0
        self.measure = 'VmHWM' if reset_rss_peak() and proc_status_kb(
            'VmHWM') is not None else 'ru_maxrss'
        return self

    def __exit__(self, *exc) -> None:
        if self.measure == 'VmHWM':
            peak = proc_status_kb('VmHWM')
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mb = max(0, peak - self.before) / 1024


def peak_cuda_mb(step: Callable[[], None]) -> float:
    """Peak allocated CUDA memory (MiB) of one step above what was there."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MB


@dataclass
class Result:
    """Measurements of one (model, size, mode)."""
    model: str
    size: int
    tokens: int
    mode: str
    batch_size: int
    times_ms: List[float] = field(default_factory=list)
    cpu_times_ms: List[float] = field(default_factory=list)
    median_ms: float = float('nan')
    iqr_ms: float = float('nan')
    median_cpu_ms: float = float('nan')
    images_per_s: float = float('nan')
    peak_mem_mb: Optional[float] = None
    saved_mb: Optional[float] = None

    def finish(self) -> None:
        """Summarise ``times_ms``."""
        if self.times_ms:
            q1, med, q3 = np.percentile(self.times_ms, [25, 50, 75])
            self.median_ms, self.iqr_ms = float(med), float(q3 - q1)
            self.images_per_s = self.batch_size * 1000 / self.median_ms
            self.median_cpu_ms = float(np.median(self.cpu_times_ms))


def benchmark_timing(specs: List[ModelSpec], models: List[nn.Module],
                     args: argparse.Namespace) -> Tuple[List[Result], str]:
    """Time every (size, mode), interleaving the models rep by rep.

    The order of the models is shuffled (seeded) in every rep so that no
    model always runs right after the same other one: a model that frees
    large buffers leaves page faults and cold caches to whoever comes next.
    With ``--memory inline`` on the CPU the last timed rep also records the
    peak RSS increase.

    Args:
        specs (list[ModelSpec]): The models' specs.
        models (list[nn.Module]): The built models.
        args (argparse.Namespace): Options.

    Returns:
        list[Result]: One per (model, size, mode).
    """
    groups = [(s, m) for s in args.sizes for m in MODES
              if m == 'infer' or s in args.train_sizes]
    results = []
    inline = args.memory == 'inline' and not args.device.startswith('cuda')
    rng = random.Random(args.seed)
    measures = set()
    bar = ProgressBar(len(groups) * (args.warmup + args.reps) * len(models))
    for size, mode in groups:
        x = torch.randn(args.batch_size, 3, size, size, device=args.device)
        steps = []
        for spec, model in zip(specs, models):
            set_mode(model, mode)
            steps.append(make_step(model, x, mode, spec.whole_model,
                                   args.amp))
        group = [
            Result(s.name, size, s.tokens(size), mode, args.batch_size)
            for s in specs
        ]
        last = args.warmup + args.reps - 1
        for rep in range(args.warmup + args.reps):
            order = list(range(len(models)))
            rng.shuffle(order)
            for i in order:
                if rep == last and inline:
                    models[i].zero_grad(set_to_none=True)
                    with RssPeak() as peak:
                        wall, cpu = time_step(steps[i], args.device)
                    group[i].peak_mem_mb = peak.mb
                    measures.add(peak.measure)
                else:
                    wall, cpu = time_step(steps[i], args.device)
                if rep >= args.warmup:
                    group[i].times_ms.append(wall * 1000)
                    group[i].cpu_times_ms.append(cpu * 1000)
                bar.update()
        for model in models:
            model.zero_grad(set_to_none=True)
            set_mode(model, 'infer')
        if args.device.startswith('cuda'):
            for i, (spec, model) in enumerate(zip(specs, models)):
                set_mode(model, mode)
                group[i].peak_mem_mb = peak_cuda_mb(
                    make_step(model, x, mode, spec.whole_model, args.amp))
                model.zero_grad(set_to_none=True)
                set_mode(model, 'infer')
        if args.saved_activations and mode == 'train':
            for i, (spec, model) in enumerate(zip(specs, models)):
                group[i].saved_mb = saved_activations_mb(
                    model, x, spec.whole_model, args.amp)
        for r in group:
            r.finish()
        results.extend(group)
    sys.stdout.write('\n')
    return results, '/'.join(sorted(measures))


def benchmark_cpu_memory(specs: List[ModelSpec], results: List[Result],
                         args: argparse.Namespace) -> str:
    """Fill ``peak_mem_mb`` of CPU results, one child process each.

    Args:
        specs (list[ModelSpec]): The models.
        results (list[Result]): Filled in place.
        args (argparse.Namespace): Options.

    Returns:
        str: The measure used.
    """
    methods = set(['forkserver']) & set(mp.get_all_start_methods())
    ctx = mp.get_context(methods.pop() if methods else 'spawn')
    if ctx.get_start_method() == 'forkserver':
        ctx.set_forkserver_preload(
            ['torch', 'mmseg_elliptical', 'mmseg.models', '__main__'])
    by_name = {s.name: s for s in specs}
    measures = set()
    print(f'Peak memory: one {ctx.get_start_method()} child process per '
          'measurement')
    bar = ProgressBar(len(results))
    for r in results:
        r.peak_mem_mb, measure = peak_rss_in_child(
            ctx, by_name[r.model], r.size, args.batch_size, r.mode,
            args.device, args.amp, args.seed, args.threads)
        measures.add(measure)
        bar.update()
    sys.stdout.write('\n')
    return '/'.join(sorted(measures))


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------
def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """``a / b`` or None."""
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def paired_ratio(a: Optional[List[float]],
                 b: Optional[List[float]]) -> Optional[float]:
    """Median over reps of ``a[i] / b[i]`` (both timed in the same rep)."""
    if not a or not b or len(a) != len(b):
        return None
    return float(np.median(np.asarray(a) / np.asarray(b)))


def ratios(specs: List[ModelSpec], results: List[Result]) -> List[dict]:
    """``subject / baseline`` for time (inference, train) and memory.

    Times are paired: the models run one after the other within each rep,
    so the median of the per-rep ratios cancels load that drifts between
    reps. ``time_*`` uses wall-clock, ``cpu_*`` process CPU time.

    Args:
        specs (list[ModelSpec]): The models, the subject first.
        results (list[Result]): The measurements.

    Returns:
        list[dict]: One row per (baseline, size).
    """
    table = {(r.model, r.size, r.mode): r for r in results}
    subject = specs[0].name
    rows = []
    for spec in specs[1:]:
        for size in sorted({r.size for r in results}):
            row = dict(subject=subject, baseline=spec.name, role=spec.role,
                       size=size, tokens=spec.tokens(size))
            for mode in MODES:
                a = table.get((subject, size, mode))
                b = table.get((spec.name, size, mode))
                row[f'time_{mode}'] = paired_ratio(a and a.times_ms, b
                                                   and b.times_ms)
                row[f'cpu_{mode}'] = paired_ratio(a and a.cpu_times_ms, b
                                                  and b.cpu_times_ms)
                row[f'mem_{mode}'] = ratio(a and a.peak_mem_mb, b
                                           and b.peak_mem_mb)
            a = table.get((subject, size, 'train'))
            b = table.get((spec.name, size, 'train'))
            row['saved_train'] = ratio(a and a.saved_mb, b and b.saved_mb)
            rows.append(row)
    return rows


def fmt(value: Optional[float], spec: str = '.3f') -> str:
    """Format a number, ``-`` for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '-'
    return format(value, spec)


def markdown(report: dict) -> str:
    """The report as markdown tables.

    Args:
        report (dict): As written to the JSON file.

    Returns:
        str: Markdown.
    """
    meta = report['meta']
    lines = [
        f"Device: {meta['device_name']}, {meta['threads']} threads, batch "
        f"{meta['batch_size']}, {meta['reps']} reps after {meta['warmup']} "
        f"warm-up, models interleaved in a shuffled order; "
        f"{meta['target']}.", '',
        f"Memory: {meta['memory_measure']}.", '',
        f"FLOPs: {meta['flops_note']}", ''
    ]
    lines += [
        '| model | role | params (M) |' + ''.join(
            f' GFLOPs@{s} |' for s in meta['flops_sizes']),
        '|---|---|---:|' + '---:|' * len(meta['flops_sizes'])
    ]
    for m in report['models']:
        flops = [fmt(m['flops'].get(str(s)) and m['flops'][str(s)] / 1e9,
                     '.2f') for s in meta['flops_sizes']]
        lines.append(f"| {m['name']} | {m['role']} | "
                     f"{m['params'] / 1e6:.2f} |" +
                     ''.join(f' {f} |' for f in flops))
    lines += [
        '', '| model | size | tokens | mode | median ms | IQR ms | img/s | '
        'CPU ms | peak mem MiB | saved MiB |',
        '|---|---:|---:|---|---:|---:|---:|---:|---:|---:|'
    ]
    for r in report['results']:
        lines.append(
            f"| {r['model']} | {r['size']} | {r['tokens']} | {r['mode']} | "
            f"{fmt(r['median_ms'], '.1f')} | {fmt(r['iqr_ms'], '.1f')} | "
            f"{fmt(r['images_per_s'], '.2f')} | "
            f"{fmt(r['median_cpu_ms'], '.1f')} | "
            f"{fmt(r['peak_mem_mb'], '.1f')} | {fmt(r['saved_mb'], '.2f')} |")
    subject = report['models'][0]['name']
    lines += [
        '', f'Ratios {subject} / baseline (< 1: {subject} is faster or '
        'smaller). time: median over reps of the per-rep wall-clock ratio '
        '(the models run back to back in every rep); cpu: the same with the '
        'process CPU time, which other processes\' load does not inflate; '
        'mem: peak memory; saved: tensors saved for the backward.', '',
        '| baseline | size | tokens | time infer | time train | cpu infer | '
        'cpu train | mem infer | mem train | saved train |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|'
    ]
    for r in report['ratios']:
        lines.append(
            f"| {r['baseline']} ({r['role']}) | {r['size']} | {r['tokens']} "
            f"| {fmt(r['time_infer'])} | {fmt(r['time_train'])} | "
            f"{fmt(r['cpu_infer'])} | {fmt(r['cpu_train'])} | "
            f"{fmt(r['mem_infer'])} | {fmt(r['mem_train'])} | "
            f"{fmt(r['saved_train'])} |")
    return '\n'.join(lines) + '\n'


def plot(report: dict, path: str) -> None:
    """Time and peak memory against the token count, log-log.

    Args:
        report (dict): As written to the JSON file.
        path (str): PNG file.
    """
    import matplotlib
    import matplotlib.ticker
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {'infer': '-o', 'train': '--s'}
    for index, m in enumerate(report['models']):
        color = f'C{index}'
        for mode in MODES:
            rows = [
                r for r in report['results']
                if r['model'] == m['name'] and r['mode'] == mode
            ]
            if not rows:
                continue
            tokens = [r['tokens'] for r in rows]
            label = f"{m['name']} {mode}"
            axes[0].plot(tokens, [r['median_ms'] for r in rows],
                         styles[mode], color=color, label=label)
            mem = [(t, r['peak_mem_mb']) for t, r in zip(tokens, rows)
                   if r['peak_mem_mb'] is not None]
            if mem:
                axes[1].plot(*zip(*mem), styles[mode], color=color,
                             label=label)
    meta = report['meta']
    axes[0].set_ylabel('median latency (ms)')
    axes[1].set_ylabel(f"peak memory (MiB, {meta['memory_short']})")
    tokens = sorted({r['tokens'] for r in report['results']})
    for ax in axes:
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xticks(tokens, [str(t) for t in tokens])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel('tokens')
        ax.grid(True, which='both', alpha=.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(f"{meta['target']} on {meta['device_name']}, batch "
                 f"{meta['batch_size']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def device_name(device: str) -> str:
    """A readable device name."""
    if device.startswith('cuda'):
        return torch.cuda.get_device_name(device)
    return f'{platform.processor() or platform.machine()} CPU ' \
        f'({os.cpu_count()} cores)'


def main(argv: Optional[Sequence[str]] = None) -> dict:
    """Run the benchmark and write ``benchmark.{json,md,png}``.

    Args:
        argv (Sequence[str], optional): Command line; ``sys.argv[1:]``.

    Returns:
        dict: The report (as in the JSON file).
    """
    args = parse_args(argv)
    start = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    mkdir_or_exist(args.out_dir)
    specs = model_specs(args)
    models = [build_model(s, args.device, args.seed) for s in specs]
    print('Models: ' + ', '.join(f'{s.name} ({s.role})' for s in specs))

    model_rows = []
    for spec, model in zip(specs, models):
        flops, uncounted = {}, {}
        for size in args.flops_sizes:
            x = torch.randn(args.batch_size, 3, size, size, device=args.device)
            flops[str(size)], uncounted = count_flops(model, x,
                                                      spec.whole_model)
        model_rows.append(
            dict(name=spec.name, role=spec.role, config=spec.config,
                 paper_reference=spec.paper_reference,
                 params=count_params(model), flops=flops,
                 uncounted_ops=uncounted))

    results, measure = benchmark_timing(specs, models, args)
    short = {'cuda': 'max_memory_allocated', 'inline': 'peak RSS increase',
             'child': 'peak RSS increase', 'none': 'not measured'}
    memory_short = short['cuda' if args.device.startswith('cuda') else
                         args.memory]
    if args.device.startswith('cuda'):
        memory = 'torch.cuda.max_memory_allocated minus allocated before ' \
            'the step'
    elif args.memory == 'child':
        del models
        measure = benchmark_cpu_memory(specs, results, args)
        memory = f'CPU peak RSS increase of one step ({measure} minus RSS ' \
            'before it), one child process per (model, size, mode)'
    elif args.memory == 'inline':
        memory = f'CPU peak RSS increase of one step ({measure} minus RSS ' \
            'before it, after malloc_trim), on the last timed rep, in process'
    else:
        memory = 'not measured (--memory none)'

    report = dict(
        meta=dict(
            command='python tools/benchmark.py ' + ' '.join(
                sys.argv[1:] if argv is None else argv),
            device=args.device, device_name=device_name(args.device),
            threads=torch.get_num_threads(), amp=args.amp,
            batch_size=args.batch_size, reps=args.reps, warmup=args.warmup,
            sizes=args.sizes, train_sizes=args.train_sizes,
            flops_sizes=args.flops_sizes,
            target='whole segmentor' if args.whole_model else 'backbone',
            memory_measure=memory, memory_short=memory_short,
            train_step='forward + backward of the sum of the outputs '
            '(train mode, no optimizer)',
            flops_note='mmengine FlopAnalyzer (as get_model_complexity_info), '
            '1 multiply-add = 1 FLOP, forward only; it has no handle for '
            'aten::scaled_dot_product_attention and aten::baddbmm, so this '
            'tool adds them from the traced shapes (SDPA: B*H*N*N*(d+d_v) '
            'per layer, i.e. 2*B*H*N*N*d*2 real FLOPs).',
            torch=torch.__version__, python=platform.python_version(),
            seconds=None),
        models=model_rows,
        results=[asdict(r) for r in results],
        ratios=ratios(specs, results))
    report['meta']['seconds'] = round(time.perf_counter() - start, 1)
    table = markdown(report)
    with open(osp.join(args.out_dir, 'benchmark.json'), 'w') as f:
        json.dump(report, f, indent=2)
    with open(osp.join(args.out_dir, 'benchmark.md'), 'w') as f:
        f.write(table)
    plot(report, osp.join(args.out_dir, 'benchmark.png'))
    print(table)
    print(f"Wrote {args.out_dir}/benchmark.{{json,md,png}} in "
          f"{report['meta']['seconds']} s")
    return report


if __name__ == '__main__':
    main()
