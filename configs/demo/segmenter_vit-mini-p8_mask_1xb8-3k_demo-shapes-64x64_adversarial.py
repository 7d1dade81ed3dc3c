# The dot-product demo trained adversarially with the cheap recipe (make
# demo-at): one PGD step of 5 levels from a random start in the L-inf ball
# of 4 levels (FGSM with a random start, Wong et al., ICLR 2020), every
# image. Cost per iteration: one more forward and backward pass (to the
# input only) and one forward (the logged pixel accuracy, adv_pixel_acc).
# The demo's custom_hooks (its end-of-run summary) stay; the base's recipe
# adds the adversarial hook after them.
_base_ = [
    './segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py',
    '../_base_/adversarial_training.py'
]
adversarial_training = dict(
    attack=dict(steps=1, step_size=5, random_start=True), ratio=1.)
