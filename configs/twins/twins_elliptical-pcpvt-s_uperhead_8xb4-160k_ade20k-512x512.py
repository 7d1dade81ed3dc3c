# mmseg's UPerNet with a Twins-PCPVT-S backbone on ADE20K with elliptical
# attention in every block but the first of each stage. mmseg's pretrained
# weights load unchanged.
_base_ = ['mmseg::twins/twins_pcpvt-s_uperhead_8xb4-160k_ade20k-512x512.py']
custom_imports = dict(imports=['mmseg_elliptical'], allow_failed_imports=False)
model = dict(backbone=dict(type='EllipticalPCPVT'))
