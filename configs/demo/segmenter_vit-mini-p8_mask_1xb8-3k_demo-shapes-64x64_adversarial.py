# The dot-product demo trained adversarially with the cheap recipe (make
# demo-at): one PGD step of 5 levels from a random start in the L-inf ball
# of 4 levels (FGSM with a random start, Wong et al., ICLR 2020), every
# image. Cost per iteration: one more forward and backward pass (to the
# input only) and one forward (the logged pixel accuracy, adv_pixel_acc).
_base_ = ['./segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py']
adversarial_attack = dict(
    name='pgd', norm='linf', eps=4, steps=1, step_size=5, random_start=True)
custom_hooks = [
    dict(type='SegSummaryHook', num_scenes=6),
    dict(type='AdversarialTrainingHook', attack=adversarial_attack, ratio=1.)
]
