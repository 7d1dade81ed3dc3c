"""Independent oracles: the method and the models written out by hand.

Each function re-computes what a part of the package (or of mmseg, for
what the tests compare against) computes, with loops over images, heads and
windows, ``q @ diag(m)`` and textbook formulas; none shares code with the
package. They read the modules' parameters and use mmseg's modules only for
what elliptical attention does not change (patch embeddings, FFNs, norms,
reduction convolutions, position encodings).
"""
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmseg.models.backbones import MAE
from mmseg.models.utils import nchw_to_nlc, nlc_to_nchw
from torch import Tensor

# --------------------------------------------------------------- the method


def naive_relevance(v: Tensor,
                    v_prev: Tensor,
                    reduction='mean',
                    eps: Optional[float] = None) -> Tensor:
    """m per (image, head) written with explicit loops over heads.

    Args:
        v, v_prev (Tensor): Values of this layer and the previous one
            ``[B, H, N, d]``.
        reduction (str): ``'mean'`` or ``'median'`` over the tokens.
        eps (float, optional): The guard: an (image, head) whose largest
            ``m_d`` is at most ``eps`` gets all ones. None: no guard (``m``
            divided by its maximum whatever it is).

    Returns:
        Tensor: ``[B, H, 1, d]``.
    """
    out = torch.empty(v.shape[0], v.shape[1], 1, v.shape[-1])
    for b in range(v.shape[0]):
        for h in range(v.shape[1]):
            diff = (v[b, h] - v_prev[b, h]).abs()  # [N, d]
            m = diff.mean(0) if reduction == 'mean' else diff.median(0).values
            if eps is not None and m.max() <= eps:
                out[b, h, 0] = torch.ones_like(m)
            else:
                out[b, h, 0] = m / m.max()
    return out


def naive_masked_attention(q: Tensor,
                           k: Tensor,
                           v: Tensor,
                           m: Optional[Tensor] = None,
                           bias: Optional[Tensor] = None,
                           window_mask: Optional[Tensor] = None,
                           scale: Optional[float] = None) -> Tensor:
    """``softmax((q diag(m)) k^T * scale + bias + mask) v`` row by row.

    Args:
        q, k, v (Tensor): ``[R, H, N, d]``, ``[R, H, M, d]`` (twice).
        m (Tensor, optional): ``[R, H, 1, d]``.
        bias (Tensor, optional): Broadcastable to ``[R, H, N, M]``.
        window_mask (Tensor, optional): ``[nW, N, M]``: row ``r`` adds
            ``window_mask[r % nW]`` (the windows of an image consecutive).
        scale (float, optional): Defaults to ``d ** -0.5``.
    """
    R, H = q.shape[:2]
    scale = q.shape[-1]**-0.5 if scale is None else scale
    bias = None if bias is None else bias.expand(R, H, q.shape[2], k.shape[2])
    out = torch.empty_like(q)
    for r in range(R):
        for h in range(H):
            qh = q[r, h] if m is None else q[r, h] @ torch.diag(m[r, h, 0])
            scores = qh @ k[r, h].T * scale
            if bias is not None:
                scores = scores + bias[r, h]
            if window_mask is not None:
                scores = scores + window_mask[r % window_mask.shape[0]]
            out[r, h] = scores.softmax(-1) @ v[r, h]
    return out


# --------------------------------------------- ViT, MiT, Twins attention


def naive_attention(attn,
                    x: Tensor,
                    v_prev: Optional[Tensor] = None,
                    reduction: str = 'mean',
                    identity: Optional[Tensor] = None,
                    hw: Optional[Sequence[int]] = None,
                    pos: Optional[Tensor] = None,
                    eps: Optional[float] = None):
    """``identity + out_proj(softmax((q diag(m)) k^T / sqrt(d)) v)``.

    Args:
        attn: An (elliptical) mmcv ``MultiheadAttention``, or MiT's / Twins'
            attention (keys and values from the spatially reduced tokens).
        x (Tensor): Normalised tokens ``[B, N, C]``.
        v_prev (Tensor, optional): Previous values; None: dot-product.
        reduction (str): Of ``m``.
        identity (Tensor, optional): The shortcut; defaults to ``x``.
        hw (tuple, optional): The token grid (spatial reduction only).
        pos (Tensor, optional): Positions ``[B, N, C]`` added to the
            inputs of the queries and keys, not of the values (mmcv's
            ``query_pos`` = ``key_pos``, as mmdet's decoder layers pass
            them to their self-attention; no spatial reduction).
        eps (float, optional): The guard of :func:`naive_relevance`.

    Returns:
        tuple: The output and the values ``[B, H, M, d]``.
    """
    C = x.shape[-1]
    H = attn.num_heads
    w, bias = attn.attn.in_proj_weight, attn.attn.in_proj_bias
    if bias is None:
        bias = torch.zeros(3 * C)
    x_kv = x
    if getattr(attn, 'sr_ratio', 1) > 1:
        x_kv = attn.norm(nchw_to_nlc(attn.sr(nlc_to_nchw(x, hw))))
    q_in, k_in = (x, x_kv) if pos is None else (x + pos, x_kv + pos)
    q = q_in @ w[:C].T + bias[:C]
    k = k_in @ w[C:2 * C].T + bias[C:2 * C]
    v = x_kv @ w[2 * C:].T + bias[2 * C:]

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], H, C // H).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    if v_prev is not None:
        m = naive_relevance(v.detach(), v_prev, reduction, eps)
        q = q @ torch.diag_embed(m[:, :, 0])
    scores = q @ k.transpose(-2, -1) / (C // H)**0.5
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
    identity = x if identity is None else identity
    return identity + attn.attn.out_proj(out), v


def naive_vit_forward(model, x: Tensor) -> Tensor:
    """mmseg's ViT (cls token, no final norm, last layer out) with the
    method written out layer by layer."""
    tokens, hw = model.patch_embed(x)
    tokens = torch.cat((model.cls_token.expand(x.shape[0], -1, -1), tokens), 1)
    tokens = tokens + model.pos_embed
    v_prev = None
    for i, layer in enumerate(model.layers):
        tokens, v = naive_attention(
            layer.attn,
            layer.norm1(tokens),
            v_prev if i in model.elliptical_layers else None,
            identity=tokens)
        tokens = layer.ffn(layer.norm2(tokens), identity=tokens)
        v_prev = v
    C = tokens.shape[-1]
    return tokens[:, 1:].transpose(1, 2).reshape(x.shape[0], C, *hw)


def naive_mit_forward(model, x: Tensor) -> list:
    """SegFormer's MiT, each block's attention written out."""
    outs = []
    for embed, blocks, norm in model.layers:
        x, hw = embed(x)
        v_prev = None
        for block in blocks:
            x, v_prev = naive_attention(
                block.attn,
                block.norm1(x),
                v_prev if block.attn.elliptical else None,
                identity=x,
                hw=hw)
            x = block.ffn(block.norm2(x), hw, identity=x)
        x = nlc_to_nchw(norm(x), hw)
        outs.append(x)
    return outs


def naive_pcpvt_forward(model, x: Tensor) -> list:
    """Twins-PCPVT, each block's attention written out."""
    outs = []
    for i in range(len(model.depths)):
        x, hw = model.patch_embeds[i](x)
        v_prev = None
        for j, block in enumerate(model.layers[i]):
            x, v_prev = naive_attention(
                block.attn,
                block.norm1(x),
                v_prev if block.attn.elliptical else None,
                identity=x,
                hw=hw)
            x = x + block.ffn(block.norm2(x))
            if j == 0:
                x = model.position_encodings[i](x, hw)
        x = nlc_to_nchw(x, hw)
        outs.append(x)
    return outs


# ------------------------------------------------------------------- Swin


def naive_window_attention(attn, x, hw, v_prev=None, scale=None):
    """Output of ``ShiftWindowMSA`` and its values ``[B, H, h * w, d]``.

    Swin's (shifted) window attention window by window in image
    coordinates: zero padding to whole windows, the cyclic shift as a
    modular index, the relative position bias from its textbook formula, the
    shift mask from the three regions of each axis, and ``m`` from the real
    tokens' values in image layout (nothing of mmseg's ``ShiftWindowMSA``
    beyond its parameters).

    Args:
        attn: The (elliptical) ``ShiftWindowMSA`` whose parameters are used.
        x (Tensor): Normalised tokens ``[B, h * w, C]``.
        hw (tuple): ``(h, w)``.
        v_prev (Tensor, optional): Previous values in image layout; None:
            dot-product scores.
        scale (float, optional): Score scale; defaults to ``d ** -0.5``.
    """
    w_msa = attn.w_msa
    B, _, C = x.shape
    h, w = hw
    ws, s = attn.window_size, attn.shift_size
    H = w_msa.num_heads
    d = C // H
    scale = d**-0.5 if scale is None else scale
    Hp, Wp = -(-h // ws) * ws, -(-w // ws) * ws
    image = x.new_zeros(B, Hp, Wp, C)
    image[:, :h, :w] = x.view(B, h, w, C)
    weight, bias = w_msa.qkv.weight, w_msa.qkv.bias
    qkv = image @ weight.T + (0 if bias is None else bias)
    q, k, v = (t.reshape(B, Hp, Wp, H, d) for t in qkv.split(C, -1))
    values = v[:, :h, :w].reshape(B, h * w, H, d).transpose(1, 2)
    if v_prev is not None:
        m = naive_relevance(values.detach(), v_prev)  # [B, H, 1, d]
        q = q * m[:, :, 0][:, None, None]
    table = w_msa.relative_position_bias_table

    def region(z, size):  # mmseg's three slices of each axis
        if s == 0 or z < size - ws:
            return 0
        return 1 if z < size - s else 2

    out = torch.zeros_like(q)
    for i in range(Hp // ws):
        for j in range(Wp // ws):
            # tokens of the window in the shifted frame, and where they are
            # in the padded image (the cyclic shift moves them by -s)
            frame = [(i * ws + a, j * ws + b) for a in range(ws)
                     for b in range(ws)]
            rows = torch.tensor([(r + s) % Hp for r, _ in frame])
            cols = torch.tensor([(c + s) % Wp for _, c in frame])
            rel = torch.tensor([[
                (r1 - r2 + ws - 1) * (2 * ws - 1) + (c1 - c2 + ws - 1)
                for r2, c2 in frame
            ] for r1, c1 in frame])
            score_bias = table[rel].permute(2, 0, 1)  # [H, T, T]
            groups = [region(r, Hp) * 3 + region(c, Wp) for r, c in frame]
            mask = torch.tensor([[0. if g1 == g2 else -100. for g2 in groups]
                                 for g1 in groups])
            qw, kw, vw = (t[:, rows, cols] for t in (q, k, v))  # [B,T,H,d]
            scores = torch.einsum('bthd,buhd->bhtu', qw, kw) * scale
            probs = (scores + score_bias + mask).softmax(-1)
            out[:, rows, cols] = torch.einsum('bhtu,buhd->bthd', probs, vw)
    out = out[:, :h, :w].reshape(B, h * w, C)
    return w_msa.proj(out), values


def naive_swin_forward(model, x):
    """The Swin backbone written out stage by stage and block by block."""
    tokens, hw = model.patch_embed(x)
    if model.use_abs_pos_embed:
        tokens = tokens + model.absolute_pos_embed.flatten(2).transpose(1, 2)
    outs, index = [], 0
    for i, stage in enumerate(model.stages):
        v_prev = None
        for block in stage.blocks:
            elliptical = index in model.elliptical_layers
            a, v_prev = naive_window_attention(block.attn, block.norm1(tokens),
                                               hw,
                                               v_prev if elliptical else None)
            tokens = tokens + a
            tokens = block.ffn(block.norm2(tokens), identity=tokens)
            index += 1
        out, out_hw = tokens, hw
        if stage.downsample is not None:
            tokens, hw = stage.downsample(tokens, hw)
        if i in model.out_indices:
            out = getattr(model, f'norm{i}')(out)
            outs.append(out.view(x.shape[0], *out_hw, -1).permute(0, 3, 1, 2))
    return outs


# -------------------------------------------------------------- BEiT, MAE


def relative_index(grid: Tuple[int, int]) -> Tensor:
    """BEiT's relative position index, cls token first."""
    Wh, Ww = grid
    L = (2 * Wh - 1) * (2 * Ww - 1) + 3
    pos = [divmod(i, Ww) for i in range(Wh * Ww)]
    index = torch.empty(Wh * Ww + 1, Wh * Ww + 1, dtype=torch.long)
    index[0, 0], index[0, 1:], index[1:, 0] = L - 1, L - 3, L - 2
    for i, (r1, c1) in enumerate(pos):
        for j, (r2, c2) in enumerate(pos):
            index[i + 1, j + 1] = (r1 - r2 + Wh - 1) * (2 * Ww - 1) + (
                c1 - c2 + Ww - 1)
    return index


def naive_beit_attention(attn, x, grid, v_prev=None, scale=None):
    """Output of ``BEiTAttention`` (before the layer scale) and its values.

    BEiT's qkv bias (``q_bias``, a zero key bias and ``v_bias``; MAE's
    plain bias; or none), the relative position bias from its textbook
    formula with the three cls entries, the score scale, and ``m`` from
    :func:`naive_relevance`.
    """
    B, n, C = x.shape
    H = attn.num_heads
    d = C // H
    weight = attn.qkv.weight
    if attn.bias == 'qv_bias':
        bias = torch.cat((attn.q_bias, torch.zeros(C), attn.v_bias))
    elif attn.qkv.bias is not None:
        bias = attn.qkv.bias
    else:
        bias = torch.zeros(3 * C)
    q, k, v = ((x @ weight[i * C:(i + 1) * C].T +
                bias[i * C:(i + 1) * C]).reshape(B, n, H, d).transpose(1, 2)
               for i in range(3))
    if v_prev is not None:
        q = q @ torch.diag_embed(naive_relevance(v.detach(), v_prev)[:, :, 0])
    scale = d**-0.5 if scale is None else scale
    table = attn.relative_position_bias_table
    rel = table[relative_index(grid)].permute(2, 0, 1)  # [H, N, N]
    probs = (q @ k.transpose(-2, -1) * scale + rel).softmax(-1)
    out = (probs @ v).transpose(1, 2).reshape(B, n, C)
    return attn.proj(out), v


def naive_beit_forward(model, x):
    """BEiT / MAE written out layer by layer (layer scale included)."""
    tokens, hw = model.patch_embed(x)
    cls_token = model.cls_token.expand(x.shape[0], -1, -1)
    tokens = torch.cat((cls_token, tokens), 1)
    if isinstance(model, MAE):
        tokens = tokens + model.pos_embed
    outs, v_prev = [], None
    for i, layer in enumerate(model.layers):
        a, v = naive_beit_attention(
            layer.attn, layer.norm1(tokens), hw,
            v_prev if i in model.elliptical_layers else None)
        tokens = tokens + layer.gamma_1 * a
        tokens = tokens + layer.gamma_2 * layer.ffn(layer.norm2(tokens))
        v_prev = v
        if i == len(model.layers) - 1 and model.final_norm:
            tokens = model.norm1(tokens)
        if i in model.out_indices:
            outs.append(tokens[:, 1:].reshape(x.shape[0], *hw,
                                              -1).permute(0, 3, 1, 2))
    return outs


# ------------------------------------- MaskFormer / Mask2Former decoders
#
# mmdet's decoder loops rewritten around :func:`naive_attention` with the
# query positions (``q @ diag(m)``, ``m`` from the values of the previous
# decoder layer over the queries, threaded by hand and detached: the
# package computes ``m`` without gradient). The heads' modules are used only
# for what elliptical attention does not change (pixel decoder,
# cross-attention, norms, FFN, prediction heads).


def naive_mask2former(head,
                      feats: Sequence[Tensor],
                      reduction: str = 'mean',
                      eps: float = 1e-6) -> tuple:
    """mmdet's ``Mask2FormerHead.forward`` with the naive self-attention.

    Returns:
        tuple: The class scores and the mask predictions of every decoder
        stage (lists, the prediction before the first layer included).
    """
    B, levels = feats[0].shape[0], head.num_transformer_feat_level
    mask_features, memories = head.pixel_decoder(feats)
    inputs, pes = [], []
    for i in range(levels):
        x = head.decoder_input_projs[i](memories[i]).flatten(2)
        inputs.append(x.permute(0, 2, 1) + head.level_embed.weight[i])
        mask = x.new_zeros((B, ) + memories[i].shape[-2:], dtype=torch.bool)
        pe = head.decoder_positional_encoding(mask)
        pes.append(pe.flatten(2).permute(0, 2, 1))
    query = head.query_feat.weight.expand(B, -1, -1)
    pos = head.query_embed.weight.expand(B, -1, -1)
    cls, masks, attn_mask = head._forward_head(query, mask_features,
                                               memories[0].shape[-2:])
    outs, v_prev = [(cls, masks)], None
    for i, layer in enumerate(head.transformer_decoder.layers):
        level = i % levels
        attn_mask = attn_mask & (attn_mask.sum(-1)
                                 != attn_mask.shape[-1]).unsqueeze(-1)
        query = layer.norms[0](
            layer.cross_attn(
                query=query,
                key=inputs[level],
                value=inputs[level],
                query_pos=pos,
                key_pos=pes[level],
                attn_mask=attn_mask))
        elliptical = i in head.elliptical_layers
        query, v = naive_attention(
            layer.self_attn,
            query,
            v_prev if elliptical else None,
            reduction,
            pos=pos,
            eps=eps)
        v_prev = v.detach()
        query = layer.norms[2](layer.ffn(layer.norms[1](query)))
        cls, masks, attn_mask = head._forward_head(
            query, mask_features, memories[(i + 1) % levels].shape[-2:])
        outs.append((cls, masks))
    return [o[0] for o in outs], [o[1] for o in outs]


def naive_maskformer(head,
                     feats: Sequence[Tensor],
                     data_samples: Sequence,
                     reduction: str = 'mean',
                     eps: float = 1e-6) -> tuple:
    """mmdet's ``MaskFormerHead.forward`` with the naive self-attention
    (the padding mask from the samples' ``img_shape`` in their
    ``batch_input_shape``).

    Returns:
        tuple: The class scores ``[L, B, Q, K + 1]`` and mask predictions
        ``[L, B, Q, h, w]`` of the ``L`` decoder layers.
    """
    metas = [s.metainfo for s in data_samples]
    B = feats[0].shape[0]
    padding = feats[-1].new_ones((B, ) + metas[0]['batch_input_shape'])
    for i, meta in enumerate(metas):
        padding[i, :meta['img_shape'][0], :meta['img_shape'][1]] = 0
    padding = F.interpolate(
        padding[:, None], size=feats[-1].shape[-2:], mode='nearest')
    padding = padding.bool()[:, 0]
    mask_features, memory = head.pixel_decoder(feats, metas)
    key_pos = head.decoder_pe(padding).flatten(2).permute(0, 2, 1)
    memory = head.decoder_input_proj(memory).flatten(2).permute(0, 2, 1)
    pos = head.query_embed.weight.expand(B, -1, -1)
    query, v_prev, outs = torch.zeros_like(pos), None, []
    for i, layer in enumerate(head.transformer_decoder.layers):
        elliptical = i in head.elliptical_layers
        query, v = naive_attention(
            layer.self_attn,
            query,
            v_prev if elliptical else None,
            reduction,
            pos=pos,
            eps=eps)
        v_prev = v.detach()
        query = layer.norms[1](
            layer.cross_attn(
                query=layer.norms[0](query),
                key=memory,
                value=memory,
                query_pos=pos,
                key_pos=key_pos,
                key_padding_mask=padding.flatten(1)))
        query = layer.norms[2](layer.ffn(query))
        outs.append(head.transformer_decoder.post_norm(query))
    out = torch.stack(outs)
    masks = torch.einsum('lbqc,bchw->lbqhw', head.mask_embed(out),
                         mask_features)
    return head.cls_embed(out), masks


# ------------------------------------------------- beyond the attention


def timm_vit_forward(sd: Dict[str, Tensor], img: Tensor, patch: int,
                     heads: int) -> Tensor:
    """timm's ViT forward written out from its state-dict keys.

    Returns:
        Tensor: The normalised patch tokens as a map ``[B, C, h, w]``.
    """
    x = F.conv2d(
        img,
        sd['patch_embed.proj.weight'],
        sd['patch_embed.proj.bias'],
        stride=patch)
    B, C, h, w = x.shape
    x = torch.cat(
        [sd['cls_token'].expand(B, -1, -1),
         x.flatten(2).transpose(1, 2)], 1) + sd['pos_embed']
    depth = len({k.split('.')[1] for k in sd if k.startswith('blocks.')})
    for i in range(depth):
        p = f'blocks.{i}.'
        y = F.layer_norm(x, (C, ), sd[p + 'norm1.weight'],
                         sd[p + 'norm1.bias'], 1e-6)
        q, k, v = F.linear(y, sd[p + 'attn.qkv.weight'],
                           sd[p + 'attn.qkv.bias']).reshape(
                               B, -1, 3, heads,
                               C // heads).permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) * (C // heads)**-0.5).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(B, -1, C)
        x = x + F.linear(y, sd[p + 'attn.proj.weight'],
                         sd[p + 'attn.proj.bias'])
        y = F.layer_norm(x, (C, ), sd[p + 'norm2.weight'],
                         sd[p + 'norm2.bias'], 1e-6)
        y = F.gelu(
            F.linear(y, sd[p + 'mlp.fc1.weight'], sd[p + 'mlp.fc1.bias']))
        x = x + F.linear(y, sd[p + 'mlp.fc2.weight'], sd[p + 'mlp.fc2.bias'])
    x = F.layer_norm(x, (C, ), sd['norm.weight'], sd['norm.bias'], 1e-6)
    return x[:, 1:].transpose(1, 2).reshape(B, C, h, w)
