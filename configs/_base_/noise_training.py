# Gaussian noise augmentation, the training of randomised smoothing's base
# models (Cohen et al., ICML 2019; SegCertify, Fischer et al., ICML 2021):
# every image of every batch gets Gaussian noise of standard deviation
# sigma on the 0-1 scale (sigma * 255 levels, not clipped), added before
# the data preprocessor normalises, a new draw each iteration, as
# tools/analysis_tools/certify.py draws it. Train at the sigma you certify
# at (docs/certify.md). Cost: one draw per image, no extra pass.
#
# Inherit it beside any config, custom_hooks or not:
#   _base_ = ['CONFIG.py', '../_base_/noise_training.py']
# (the config needs custom_imports=dict(imports=['mmseg_elliptical'])). The
# recipe is a key of its own, NoiseTrainingHook's arguments; the plugin's
# recipe runner appends the hook to the config's custom_hooks. Change a
# field in the inheriting config, e.g. noise_training = dict(sigma=0.5).
# With adversarial training: inherit adversarial_training.py and write
# noise_training = dict(sigma=0.25) in the config (two bases may not both
# set runner_type); the noise is added first, the attack starts from it.
runner_type = 'AdversarialTrainingRunner'
noise_training = dict(sigma=0.25, ratio=1.)
