# The cheap PGD-AT recipe ('pgd-at-2' in engine/training_benchmark.py): as
# adversarial_training.py (L-inf eps 4 levels, steps of 2.55 levels, no
# random start, every image) with 2 steps, the default of Pgd_Attack's
# constructor in SEA's code, not what SEA's configs train with (5, or 20
# for ADE20K ConvNeXt). Cost per iteration: 2 more forward and backward
# passes (to the input only) and one forward. Inherit it beside any
# config, as adversarial_training.py.
_base_ = ['./adversarial_training.py']
adversarial_training = dict(attack=dict(steps=2))
