"""Export versions of mmdet's MaskFormer / Mask2Former parts (needs mmdet;
docs/deploy.md, "MaskFormer and Mask2Former")."""
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.dense_heads import Mask2FormerHead, MaskFormerHead
from mmdet.models.layers import (MSDeformAttnPixelDecoder,
                                 TransformerEncoderPixelDecoder)
from torch import Tensor

from .deform_attn import level_starts


def padding_mask(batch_img_metas: Sequence[dict], batch_size: int,
                 size: Sequence[int], device: torch.device) -> Tensor:
    """mmdet's MaskFormer padding mask ``[batch_size, h, w]`` (True outside
    each ``img_shape``), without a loop over the batch.

    Args:
        batch_img_metas (Sequence[dict]): One meta for the batch, or one per
            image.
        batch_size (int): Images in the batch.
        size (Sequence[int]): The feature map's ``(h, w)``.
        device (torch.device): Where to build the mask.
    """
    count = len(batch_img_metas)
    if count != 1 and count != batch_size:
        raise ValueError(f'{count} image metas for a batch of {batch_size}: '
                         'give one per image, or one for the batch.')
    input_h, input_w = batch_img_metas[0]['batch_input_shape']
    rows = torch.arange(input_h, device=device)[:, None]
    cols = torch.arange(input_w, device=device)[None, :]
    masks = []
    for meta in batch_img_metas:
        img_h, img_w = meta['img_shape']
        masks.append((rows >= img_h) | (cols >= img_w))
    mask = torch.stack(masks).to(torch.float32)
    if count == 1:
        mask = mask.expand(batch_size, -1, -1)
    return F.interpolate(
        mask.unsqueeze(1), size=size, mode='nearest').to(torch.bool).squeeze(1)


class ExportMSDeformAttnPixelDecoder(MSDeformAttnPixelDecoder):
    """mmdet's ``MSDeformAttnPixelDecoder`` with the level sizes as
    integers."""

    def forward(self, feats: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        batch_size = feats[0].shape[0]
        inputs, masks, positions, shapes, points = [], [], [], [], []
        for i in range(self.num_encoder_levels):
            level_idx = self.num_input_levels - i - 1
            feat = feats[level_idx]
            h, w = feat.shape[-2:]
            mask = feat.new_zeros((batch_size, h, w), dtype=torch.bool)
            position = self.level_encoding.weight[i].view(1, -1, 1, 1) \
                + self.postional_encoding(mask)
            reference = self.point_generator.single_level_grid_priors(
                (h, w), level_idx, device=feat.device)
            stride = self.strides[level_idx]
            # torch.tensor, not new_tensor: new_tensor specialises symbolic
            # sizes to the traced ones, silently
            size = torch.tensor([[w * stride, h * stride]],
                                dtype=reference.dtype,
                                device=reference.device)
            reference = reference / size
            inputs.append(self.input_convs[i](feat).flatten(2).permute(
                0, 2, 1))
            masks.append(mask.flatten(1))
            positions.append(position.flatten(2).permute(0, 2, 1))
            shapes.append((h, w))
            points.append(reference)
        reference = torch.cat(points)[None, :, None]
        reference = reference.repeat(batch_size, 1, self.num_encoder_levels, 1)
        memory = self.encoder(
            query=torch.cat(inputs, dim=1),
            query_pos=torch.cat(positions, dim=1),
            key_padding_mask=torch.cat(masks, dim=1),
            spatial_shapes=shapes,
            reference_points=reference,
            level_start_index=level_starts(shapes),
            valid_ratios=reference.new_ones(
                (batch_size, self.num_encoder_levels, 2)))
        memory = memory.permute(0, 2, 1)
        outs = torch.split(memory, [h * w for h, w in shapes], dim=-1)
        outs = [
            x.reshape(batch_size, -1, h, w) for x, (h, w) in zip(outs, shapes)
        ]
        for i in range(self.num_input_levels - self.num_encoder_levels - 1, -1,
                       -1):
            lateral = self.lateral_convs[i](feats[i])
            y = lateral + F.interpolate(
                outs[-1],
                size=lateral.shape[-2:],
                mode='bilinear',
                align_corners=False)
            outs.append(self.output_convs[i](y))
        return self.mask_feature(outs[-1]), outs[:self.num_outs]


class ExportTransformerEncoderPixelDecoder(TransformerEncoderPixelDecoder):
    """mmdet's ``TransformerEncoderPixelDecoder`` with the padding mask of
    :func:`padding_mask`."""

    def forward(self, feats: List[Tensor],
                batch_img_metas: List[dict]) -> Tuple[Tensor, Tensor]:
        feat_last = feats[-1]
        bs, _, h, w = feat_last.shape
        mask = padding_mask(batch_img_metas, bs, (h, w), feat_last.device)
        pos_embed = self.positional_encoding(mask)
        feat_last = self.encoder_in_proj(feat_last).flatten(2).permute(0, 2, 1)
        memory = self.encoder(
            query=feat_last,
            query_pos=pos_embed.flatten(2).permute(0, 2, 1),
            key_padding_mask=mask.flatten(1))
        memory = memory.permute(0, 2, 1).view(bs, self.encoder_embed_dims, h,
                                              w)
        y = self.encoder_out_proj(memory)
        for i in range(self.num_inputs - 2, -1, -1):
            lateral = self.lateral_convs[i](feats[i])
            y = self.output_convs[i](
                lateral +
                F.interpolate(y, size=lateral.shape[-2:], mode='nearest'))
        return self.mask_feature(y), memory


class ExportMaskFormerForward(MaskFormerHead):
    """mmdet's ``MaskFormerHead.forward`` with the padding mask of
    :func:`padding_mask`."""

    def forward(self, x: Tuple[Tensor], batch_data_samples) -> Tuple[Tensor]:
        batch_img_metas = [s.metainfo for s in batch_data_samples]
        batch_size = x[0].shape[0]
        mask = padding_mask(batch_img_metas, batch_size, x[-1].shape[-2:],
                            x[-1].device)
        mask_features, memory = self.pixel_decoder(x, batch_img_metas)
        pos_embed = self.decoder_pe(mask)
        memory = self.decoder_input_proj(memory).flatten(2).permute(0, 2, 1)
        query_embed = self.query_embed.weight.unsqueeze(0).repeat(
            batch_size, 1, 1)
        out_dec = self.transformer_decoder(
            query=torch.zeros_like(query_embed),
            key=memory,
            value=memory,
            query_pos=query_embed,
            key_pos=pos_embed.flatten(2).permute(0, 2, 1),
            key_padding_mask=mask.flatten(1))
        all_cls_scores = self.cls_embed(out_dec)
        all_mask_preds = torch.einsum('lbqc,bchw->lbqhw',
                                      self.mask_embed(out_dec), mask_features)
        return all_cls_scores, all_mask_preds


#: mmdet's class -> its export version (None: exports as it is).
EXPORT_VERSIONS = {
    MSDeformAttnPixelDecoder: ExportMSDeformAttnPixelDecoder,
    TransformerEncoderPixelDecoder: ExportTransformerEncoderPixelDecoder,
    MaskFormerHead: ExportMaskFormerForward,
    Mask2FormerHead: None,
}
