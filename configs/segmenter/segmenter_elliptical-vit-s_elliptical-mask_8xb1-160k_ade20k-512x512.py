# As segmenter_elliptical-vit-s_mask, with elliptical attention in the mask
# transformer head too (its layer 1; layer 0 stays dot-product).
_base_ = ['./segmenter_elliptical-vit-s_mask_8xb1-160k_ade20k-512x512.py']
model = dict(decode_head=dict(type='EllipticalMaskTransformerHead'))
