"""The export version of mmcv's ``MultiScaleDeformableAttention``
(Mask2Former's pixel decoder): the grid-sample path with the level sizes as
integers, which ``torch.export`` traces (docs/deploy.md)."""
from typing import List, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import MultiScaleDeformableAttention
from torch import Tensor

Shapes = Union[Tensor, Sequence[Tuple[int, int]]]


def level_shapes(spatial_shapes: Shapes) -> List[Tuple[int, int]]:
    """Each level's ``(h, w)`` as integers: mmdet's ``[L, 2]`` tensor read
    (eager only) or the integers themselves (symbolic in an export)."""
    if isinstance(spatial_shapes, Tensor):
        return [(int(h), int(w)) for h, w in spatial_shapes.tolist()]
    return [(h, w) for h, w in spatial_shapes]


def level_starts(shapes: Sequence[Tuple[int, int]]) -> List[int]:
    """The start of each level in the flattened values: ``[0, h_0 * w_0,
    h_0 * w_0 + h_1 * w_1, ...]`` (mmdet's ``level_start_index``)."""
    starts = [0]
    for h, w in shapes[:-1]:
        starts.append(starts[-1] + h * w)
    return starts


def deformable_attention(value: Tensor, shapes: Sequence[Tuple[int, int]],
                         sampling_locations: Tensor,
                         attention_weights: Tensor) -> Tensor:
    """mmcv's ``multi_scale_deformable_attn_pytorch`` with the level sizes
    as integers.

    Args:
        value (Tensor): ``[B, sum(h * w), heads, dims]``.
        shapes (Sequence[tuple[int, int]]): Each level's ``(h, w)``.
        sampling_locations (Tensor): ``[B, Q, heads, levels, points, 2]``,
            ``(x, y)`` in ``[0, 1]``.
        attention_weights (Tensor): ``[B, Q, heads, levels, points]``.

    Returns:
        Tensor: ``[B, Q, heads * dims]``.
    """
    bs, _, num_heads, embed_dims = value.shape
    _, num_queries, _, num_levels, num_points, _ = sampling_locations.shape
    grids = 2 * sampling_locations - 1
    sampled = []
    starts = level_starts(shapes)
    for level, (h, w) in enumerate(shapes):
        start = starts[level]
        # [B, h*w, heads, dims] -> [B * heads, dims, h, w]
        value_l = value[:, start:start + h * w].flatten(2).transpose(
            1, 2).reshape(bs * num_heads, embed_dims, h, w)
        # [B, Q, heads, points, 2] -> [B * heads, Q, points, 2]
        grid_l = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(
            F.grid_sample(
                value_l,
                grid_l,
                mode='bilinear',
                padding_mode='zeros',
                align_corners=False))
    weights = attention_weights.transpose(1, 2)
    weights = weights.reshape(bs * num_heads, 1, num_queries,
                              num_levels * num_points)
    output = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return output.view(bs, num_heads * embed_dims,
                       num_queries).transpose(1, 2).contiguous()


class ExportMultiScaleDeformableAttention(MultiScaleDeformableAttention):
    """mmcv's ``MultiScaleDeformableAttention``, its grid-sample path (no
    CUDA kernel), with ``spatial_shapes`` a tensor or ``[(h, w), ...]``
    integers; ``level_start_index`` is not read."""

    def forward(self,
                query: Tensor,
                key: Tensor = None,
                value: Tensor = None,
                identity: Tensor = None,
                query_pos: Tensor = None,
                key_padding_mask: Tensor = None,
                reference_points: Tensor = None,
                spatial_shapes: Shapes = None,
                level_start_index=None,
                **kwargs) -> Tensor:
        if value is None:
            value = query
        if identity is None:
            identity = query
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query = query.permute(1, 0, 2)
            value = value.permute(1, 0, 2)
        bs, num_query, _ = query.shape
        _, num_value, _ = value.shape
        shapes = level_shapes(spatial_shapes)
        if not torch.compiler.is_compiling() and sum(
                h * w for h, w in shapes) != num_value:
            raise ValueError(
                f'{type(self).__name__}: spatial_shapes {shapes} cover '
                f'{sum(h * w for h, w in shapes)} values, got {num_value}.')
        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_value, self.num_heads, -1)
        sampling_offsets = self.sampling_offsets(query).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points, 2)
        attention_weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_levels * self.num_points)
        attention_weights = attention_weights.softmax(-1).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points)
        if reference_points.shape[-1] == 2:
            # (w, h) per level, as mmcv's offset_normalizer
            normalizer = torch.tensor([[w, h] for h, w in shapes],
                                      dtype=sampling_offsets.dtype,
                                      device=sampling_offsets.device)
            sampling_locations = reference_points[:, :, None, :, None, :] \
                + sampling_offsets / normalizer[None, None, None, :, None, :]
        elif reference_points.shape[-1] == 4:
            sampling_locations = reference_points[:, :, None, :, None, :2] \
                + sampling_offsets / self.num_points \
                * reference_points[:, :, None, :, None, 2:] * 0.5
        else:
            raise ValueError(
                'Last dim of reference_points must be 2 or 4, but get '
                f'{reference_points.shape[-1]} instead.')
        output = deformable_attention(value, shapes, sampling_locations,
                                      attention_weights)
        output = self.output_proj(output)
        if not self.batch_first:
            output = output.permute(1, 0, 2)
        return self.dropout(output) + identity


EXPORT_VERSIONS = {
    MultiScaleDeformableAttention: ExportMultiScaleDeformableAttention,
}
