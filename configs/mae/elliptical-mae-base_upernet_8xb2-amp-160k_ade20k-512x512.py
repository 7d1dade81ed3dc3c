# mmseg's UPerNet MAE-B on ADE20K 512x512 (mixed precision) with elliptical
# attention in backbone layers 1..11. mmseg's MAE weights load unchanged.
_base_ = ['mmseg::mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalMAE'))
