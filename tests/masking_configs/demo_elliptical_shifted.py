# make demo's elliptical model behind tests/masking.py's
# RandomShiftEncoderDecoder: each image rolled by a random offset of up to 4
# pixels at every forward and its logits rolled back (a randomised defence;
# the patch grid sees another crop at each draw). A test helper, not a
# package feature. Give it make demo's checkpoint, with tests/ on the path:
#   PYTHONPATH=tests tools/dist_adversarial.sh 2 CONFIG CKPT \
#       tests/masking_configs/demo_elliptical_shifted.py CKPT ... --audit
_base_ = [
    '../../configs/demo/'
    'segmenter_elliptical-vit-mini-p8_mask_1xb8-3k_demo-shapes-64x64.py'
]
custom_imports = dict(
    imports=['mmseg_elliptical', 'masking'], allow_failed_imports=False)
model = dict(type='RandomShiftEncoderDecoder', shift=4)
