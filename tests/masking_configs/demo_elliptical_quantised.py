# make demo's elliptical model behind tests/masking.py's
# QuantisingPreProcessor: the 0-255 input rounded to multiples of 32 levels
# before the normalisation, so every input gradient is 0 (a model that masks
# its gradients on purpose; a test helper, not a package feature). Give it
# make demo's checkpoint, with tests/ on the path for the helper:
#   PYTHONPATH=tests tools/dist_adversarial.sh 2 CONFIG CKPT \
#       tests/masking_configs/demo_elliptical_quantised.py CKPT ... --audit
_base_ = [
    '../../configs/demo/'
    'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py'
]
custom_imports = dict(
    imports=['mmseg_elliptical', 'masking'], allow_failed_imports=False)
model = dict(data_preprocessor=dict(type='QuantisingPreProcessor', step=32.))
