"""The small vocabularies of the tools' options, on the bottom floor so that
a tool checks its choices before the heavy imports."""

PARTS = ('backbone', 'decode_head')  # that can be elliptical
ROLES = ('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref')  # benchmark
DEFAULT_ROLES = ('elliptical', 'fused-dot', 'mmseg-dot')
MEMORY = ('tensors', 'none')  # the benchmark's memory column
CLOCKS = ('wall', 'process')  # the benchmark's clocks
EXECUTORS = ('local', 'slurm', 'debug')  # where compare_seeds' runs run
#: The ONNX opset: 18 has ``Resize`` with antialias, ``ReduceMean`` axes as
#: input.
OPSET = 18
