"""Measure models side by side: parameters, FLOPs, time, memory, and the
ratios of each config's elliptical model to its baselines."""
import os
import platform
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.benchmark.utils.common import set_torch_threads

from ..utils.choices import MEMORY  # noqa: F401 (--memory)
from .apgd_step import APGD_MODE, apgd_ratios, check_apgd_steps, per_iteration
from .flops import count_flops, count_params
from .memory import saved_tensors_mb, step_peak_mb
from .onnx import ROLE as ONNX_ROLE
from .onnx import onnx_name, onnxruntime_step, runtime_ratios
from .timing import (make_timer, mode_ratios, paired_ratio, ratio,
                     run_interleaved, time_stats)
from .variants import (ATTACK_MODES, MODES, BenchForward, BenchModel,
                       build_model, make_step)


@dataclass
class BenchmarkOptions:
    """What is measured, and how.

    Attributes:
        sizes (list[int]): Square input sizes of inference.
        train_sizes (list[int]): Sizes at which a training step is measured.
        attack_sizes (list[int]): Sizes at which both attack steps are
            measured, in the same rounds.
        apgd_steps (int): With ``attack_sizes``, also time a run of APGD-MCE
            of this many iterations per iteration, in the attack steps'
            rounds (0: none; else >= 4).
        batch_size (int): Images per step.
        rounds (int): Interleaved timing rounds.
        min_run_time (float): Timed seconds per model and round (0: one run).
        warmup (int): Untimed steps per model before the rounds.
        device (str): ``'cpu'`` or a CUDA device.
        amp (bool): bf16 autocast.
        compile (str, optional): ``torch.compile`` backend; None: eager.
        compile_mode (str): ``torch.compile``'s ``mode`` (``'default'``;
            ``'reduce-overhead'``: CUDA graphs).
        threads (int): torch threads (0: torch's default).
        clock (str): ``'wall'`` or ``'process'``.
        memory (str): ``'tensors'`` (peak of one step) or ``'none'``.
        saved_tensors (bool): Also measure the saved tensors.
        flops_sizes (list[int]): Sizes at which FLOPs are counted.
        seed (int): Seed of weights, inputs and orders.
        onnxruntime (bool): Also time the elliptical model in onnxruntime
            (inference, CPU).
    """
    sizes: List[int] = field(default_factory=lambda: [512])
    train_sizes: List[int] = field(default_factory=lambda: [512])
    attack_sizes: List[int] = field(default_factory=list)
    apgd_steps: int = 0
    batch_size: int = 1
    rounds: int = 10
    min_run_time: float = 0.
    warmup: int = 1
    device: str = 'cpu'
    amp: bool = False
    compile: Optional[str] = None
    compile_mode: str = 'default'
    threads: int = 1
    clock: str = 'wall'
    memory: str = 'tensors'
    saved_tensors: bool = False
    flops_sizes: List[int] = field(default_factory=list)
    seed: int = 0
    onnxruntime: bool = False

    @classmethod
    def from_args(cls, args) -> 'BenchmarkOptions':
        """The options of a parsed command line with an argument per field
        (``compile`` a flag and its backend in ``compile_backend``)."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        values['compile'] = args.compile_backend if args.compile else None
        return cls(**values)

    def groups(self) -> List[Tuple[int, Tuple[str, ...]]]:
        """The (size, modes) timed together, in order."""
        wanted = dict(train=self.train_sizes, attack=self.attack_sizes)
        attack = ATTACK_MODES + ((APGD_MODE, ) if self.apgd_steps else ())
        return [(s, g) for s in self.sizes
                for g in (('infer', ), ('train', ), attack)
                if g[0] == 'infer' or s in wanted[g[0]]]


def runner_of(model: BenchForward, options: BenchmarkOptions) -> Callable:
    """``model`` or ``torch.compile(model)`` when asked."""
    if options.compile:  # one static graph per input size and mode
        mode = None if options.compile_mode == 'default' else \
            options.compile_mode
        return torch.compile(
            model, backend=options.compile, mode=mode, dynamic=False)
    return model


def _complexity(spec: BenchModel, model: BenchForward,
                options: BenchmarkOptions) -> Dict:
    flops, uncounted = {}, {}
    model.eval()
    for size in options.flops_sizes:
        x = torch.randn(
            options.batch_size, 3, size, size, device=options.device)
        flops[str(size)], uncounted = count_flops(model, x)
    return dict(
        name=spec.name,
        family=spec.family,
        role=spec.role,
        config=spec.config,
        params=count_params(model),
        flops=flops,
        uncounted_ops=uncounted)


def _timed_name(name: str, mode: str) -> str:
    """The key of a model's timer in one mode (a group may time a model in
    more than one: the attack steps)."""
    return f'{name} ({mode})'


def _measure_group(specs: Sequence[BenchModel], models: Sequence[BenchForward],
                   runners: Sequence[Callable], size: int,
                   modes: Tuple[str, ...], options: BenchmarkOptions,
                   on_step: Optional[Callable]) -> List[Dict]:
    """Time and measure every model at one size in each of ``modes``,
    interleaved in the same rounds."""
    x = torch.randn(options.batch_size, 3, size, size, device=options.device)
    runs = [(s, m, mode,
             make_step(m, x, mode, options.amp, r, options.apgd_steps))
            for mode in modes for s, m, r in zip(specs, models, runners)]
    infer = modes == ('infer', )
    onnx = {
        s.name: onnxruntime_step(m, x, options.threads)
        for s, m in zip(specs, models)
        if options.onnxruntime and infer and s.role in ('elliptical', 'model')
    }
    for step in [*(r[-1] for r in runs), *onnx.values()]:
        for _ in range(options.warmup):
            step()
    timers = {
        _timed_name(s.name, mode):
        make_timer(step, f'{size}x{size} {mode}', s.family, s.role,
                   torch.get_num_threads(), options.clock)
        for s, _, mode, step in runs
    }
    timers.update({
        onnx_name(name):
        make_timer(step, f'{size}x{size} infer', name, ONNX_ROLE,
                   torch.get_num_threads(), options.clock)
        for name, step in onnx.items()
    })
    rounds = run_interleaved(timers, options.rounds, options.min_run_time,
                             options.seed, on_step)
    group = []
    for spec, model, mode, step in runs:
        row = dict(
            model=spec.name,
            family=spec.family,
            role=spec.role,
            size=size,
            mode=mode,
            batch_size=options.batch_size,
            **time_stats(rounds[_timed_name(spec.name, mode)],
                         options.batch_size),
            peak_mem_mb=None,
            memory_measure=None,
            saved_mb=None)
        if mode == APGD_MODE:  # the time of one iteration
            row = per_iteration(row, step.iterations)
        model.zero_grad(set_to_none=True)
        if options.memory == 'tensors':
            row['peak_mem_mb'], row['memory_measure'] = step_peak_mb(
                step, options.device)
            model.zero_grad(set_to_none=True)
        if options.saved_tensors and mode == 'train':
            autocast = torch.autocast(
                x.device.type, torch.bfloat16, enabled=options.amp)
            with autocast:
                row['saved_mb'] = saved_tensors_mb(model, lambda: model(x))
        group.append(row)
    by_name = {s.name: s for s in specs}
    for name in onnx:
        group.append(
            dict(
                model=onnx_name(name),
                family=by_name[name].family,
                role=ONNX_ROLE,
                size=size,
                mode='infer',
                batch_size=options.batch_size,
                **time_stats(rounds[onnx_name(name)], options.batch_size),
                peak_mem_mb=None,
                memory_measure=None,
                saved_mb=None,
                pytorch=name))
    for model in models:
        model.eval()
    return group


def run_benchmark(specs: Sequence[BenchModel],
                  options: BenchmarkOptions,
                  on_step: Optional[Callable[[], None]] = None) -> Dict:
    """Measure every model; return the report data.

    Args:
        specs (Sequence[BenchModel]): The models; names must differ.
        options (BenchmarkOptions): What to measure.
        on_step (callable, optional): Called after each timed block.

    Returns:
        dict: ``meta``, ``models``, ``results`` (per model, size and mode),
        ``ratios``, ``runtime_ratios``, ``adaptive_ratios`` and
        ``apgd_ratios`` (APGD-MCE iteration / PGD's attack step).
    """
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f'Model names must differ, got {names}.')
    if options.memory not in MEMORY:
        raise ValueError(f'memory={options.memory!r} must be one of '
                         f'{MEMORY}.')
    for kind in ('train', 'attack'):
        unknown = sorted(
            set(getattr(options, f'{kind}_sizes')) - set(options.sizes))
        if unknown:
            raise ValueError(f'{kind} sizes {unknown} are not among the '
                             f'sizes {options.sizes}.')
    check_apgd_steps(options.apgd_steps)
    threads = options.threads or torch.get_num_threads()
    with set_torch_threads(threads):
        models = [build_model(s, options.device, options.seed) for s in specs]
        complexity = [
            _complexity(s, m, options) for s, m in zip(specs, models)
        ]
        runners = [runner_of(m, options) for m in models]
        results = []
        for size, modes in options.groups():
            results += _measure_group(specs, models, runners, size, modes,
                                      options, on_step)
        del models, runners
    meta = dict(
        options=asdict(options),
        threads=threads,
        target='segmentor' if any(s.whole_model
                                  for s in specs) else 'backbone',
        device_name=device_name(options.device),
        torch=torch.__version__,
        python=platform.python_version())
    return dict(
        meta=meta,
        models=complexity,
        results=results,
        ratios=ratios(specs, results),
        runtime_ratios=runtime_ratios(results),
        adaptive_ratios=adaptive_ratios(results),
        apgd_ratios=apgd_ratios(results))


def device_name(device: str) -> str:
    """A readable name of the device."""
    if device.startswith('cuda'):
        return torch.cuda.get_device_name(device)
    return f'{platform.processor() or platform.machine()} CPU ' \
        f'({os.cpu_count()} cores)'


def ratios(specs: Sequence[BenchModel], results: Sequence[Dict]) -> List[Dict]:
    """Elliptical / baseline rows per (config, baseline, size, mode): time
    paired per round, memory and saved tensors one ratio each."""
    table = {(r['model'], r['size'], r['mode']): r for r in results}
    rows = []
    for subject in (s for s in specs if s.role == 'elliptical'):
        for base in (s for s in specs
                     if s.family == subject.family and s is not subject):
            for size, mode in sorted({(r['size'], r['mode'])
                                      for r in results},
                                     key=lambda k: (k[0], MODES.index(k[1]))):
                a = table[(subject.name, size, mode)]
                b = table[(base.name, size, mode)]
                rows.append(
                    dict(
                        family=subject.family,
                        subject=subject.name,
                        baseline=base.name,
                        role=base.role,
                        size=size,
                        mode=mode,
                        **paired_ratio(a['round_ms'], b['round_ms']).row(),
                        memory=ratio(a['peak_mem_mb'], b['peak_mem_mb']),
                        saved=ratio(a['saved_mb'], b['saved_mb'])))
    return rows


def adaptive_ratios(results: Sequence[Dict]) -> List[Dict]:
    """Adaptive / plain attack step of each model and size: the extra cost
    of differentiating through ``m`` (:func:`~.timing.mode_ratios`)."""
    return mode_ratios(results, 'attack-adaptive')
