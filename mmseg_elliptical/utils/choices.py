"""The small vocabularies of the tools' options and the transforms, on the
bottom layer so that a tool checks its choices before the heavy imports."""
from typing import Tuple

PARTS = ('backbone', 'decode_head')  # that can be elliptical
ROLES = ('elliptical', 'fused-dot', 'mmseg-dot', 'paper-ref')  # benchmark
DEFAULT_ROLES = ('elliptical', 'fused-dot', 'mmseg-dot')
MEMORY = ('tensors', 'none')  # the benchmark's memory column
CLOCKS = ('wall', 'process')  # the benchmark's clocks
EXECUTORS = ('local', 'slurm', 'debug')  # where compare_seeds' runs run
#: The ONNX opset: 18 has ``Resize`` with antialias, ``ReduceMean`` axes as
#: input.
OPSET = 18
#: ``imagecorruptions``' names (Hendrycks & Dietterich, ICLR 2019; the
#: transform ImageCorruption and the corruption grid): the 15 corruptions
#: of ImageNet-C / Cityscapes-C, in the library's order.
COMMON_CORRUPTIONS: Tuple[str,
                          ...] = ('gaussian_noise', 'shot_noise',
                                  'impulse_noise', 'defocus_blur',
                                  'glass_blur', 'motion_blur', 'zoom_blur',
                                  'snow', 'frost', 'fog', 'brightness',
                                  'contrast', 'elastic_transform', 'pixelate',
                                  'jpeg_compression')
#: The 4 held-out ("validation") corruptions of the benchmark.
EXTRA_CORRUPTIONS: Tuple[str, ...] = ('speckle_noise', 'gaussian_blur',
                                      'spatter', 'saturate')
#: All 19, as ``imagecorruptions.get_corruption_names('all')`` lists them.
CORRUPTIONS: Tuple[str, ...] = COMMON_CORRUPTIONS + EXTRA_CORRUPTIONS
SEVERITIES: Tuple[int, ...] = (1, 2, 3, 4, 5)
