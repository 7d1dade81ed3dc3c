# mmseg's UPerNet BEiT-B on ADE20K 640x640 with elliptical attention in
# backbone layers 1..11. mmseg's BEiT weights load unchanged.
_base_ = ['mmseg::beit/beit-base_upernet_8xb2-160k_ade20k-640x640.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalBEiT'))
