# The dot-product demo trained under Gaussian noise of sigma 0.25 (0-1
# scale) on every image (make certify-noise): the base models randomised
# smoothing certifies (docs/certify.md). The demo's custom_hooks (its
# end-of-run summary) stay; the recipe adds the noise hook after them.
_base_ = [
    './segmenter_vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py',
    '../_base_/noise_training.py'
]
noise_training = dict(sigma=0.25, ratio=1.)
