# PIR-AT as SEA trains UperNet-ConvNeXt on ADE20K (configs/
# ade20k_convnext.yaml of nmndeep/Robust-Segmentation: N_ITERS 20): PGD,
# L-inf eps 4 levels, 20 steps of 2.55 levels, no random start, every
# image. Otherwise as adversarial_training.py (5 steps). Cost per
# iteration: 20 more forward and backward passes (to the input only) and
# one forward. Inherit it beside any config, as adversarial_training.py.
_base_ = ['./adversarial_training.py']
adversarial_training = dict(attack=dict(steps=20))
