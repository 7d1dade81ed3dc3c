"""The small vocabularies of the tools' options, on the bottom floor so that
a tool checks its choices before the heavy imports."""

#: The parts of a segmentor that can be elliptical (``models.transformer``).
PARTS = ('backbone', 'decode_head')
#: The benchmark's variants of each config (``benchmark.variants``).
ROLES = ('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref')
DEFAULT_ROLES = ('elliptical', 'fused-dot', 'mmseg-dot')
#: What the benchmark's memory column measures (``benchmark.runner``).
MEMORY = ('tensors', 'none')
#: The benchmark's clocks (``benchmark.timing``).
CLOCKS = ('wall', 'process')
#: Where compare_seeds' runs run (``engine.cluster``).
EXECUTORS = ('local', 'slurm', 'debug')
#: The ONNX export's opset (``deploy.export``): 18 gives ``Resize`` with
#: antialias and ``ReduceMean`` with axes as input.
OPSET = 18
