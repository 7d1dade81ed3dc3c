"""Statistics of recorded tokens and relevance vectors."""
import torch
import torch.nn.functional as F
from torch import Tensor


def mean_pairwise_cosine(tokens: Tensor, eps: float = 1e-8) -> Tensor:
    """Mean cosine similarity over all token pairs ``i < j``, per sample
    (float64), in ``O(N C)``: ``(|sum u_i|^2 - sum |u_i|^2) / (N (N-1))``.

    Args:
        tokens (Tensor): ``[B, N, C]`` tokens, ``N >= 2``.
        eps (float): Norm floor of the normalisation.
    """
    if tokens.dim() != 3 or tokens.shape[1] < 2:
        raise ValueError('mean_pairwise_cosine needs tokens of shape '
                         f'[B, N >= 2, C], got {tuple(tokens.shape)}.')
    unit = F.normalize(tokens.detach().double(), dim=-1, eps=eps)
    n = unit.shape[1]
    total = unit.sum(dim=1).pow(2).sum(dim=-1)
    self_sim = unit.pow(2).sum(dim=(1, 2))
    return (total - self_sim) / (n * (n - 1))


def relevance_spread(m: Tensor) -> Tensor:
    """Spread ``[B]`` of the relevance ``m`` ``[B, H, 1, d]``: population
    std over coordinates, mean over heads (0: dot product)."""
    if m.dim() != 4 or m.shape[2] != 1:
        raise ValueError(
            f'relevance_spread needs m of shape [B, H, 1, d], got '
            f'{tuple(m.shape)}.')
    return torch.std(
        m.detach().double(), dim=-1, correction=0).mean(dim=(1, 2))


def relevance_statistics(m: Tensor) -> dict:
    """Mean, minimum and effective number of coordinates of ``m``.

    Args:
        m (Tensor): ``[B, H, 1, d]`` relevance.

    Returns:
        dict: ``mean``, ``min`` (over heads and coordinates) and
        ``effective``: ``(sum m)^2 / sum m^2 / d`` per head (1 when every
        coordinate weighs alike, i.e. dot product), mean over heads; each
        ``[B]`` (float64).
    """
    if m.dim() != 4 or m.shape[2] != 1:
        raise ValueError(
            f'relevance_statistics needs m of shape [B, H, 1, d], got '
            f'{tuple(m.shape)}.')
    m = m.detach().double()[:, :, 0]
    effective = m.sum(-1).pow(2) / m.pow(2).sum(-1).clamp_min(1e-300)
    return dict(
        mean=m.mean(dim=(1, 2)),
        min=m.amin(dim=(1, 2)),
        effective=(effective / m.shape[-1]).mean(dim=1))


def attention_entropy(probs: Tensor) -> Tensor:
    """Mean entropy (nats) of attention rows, per batch entry.

    Args:
        probs (Tensor): ``[B', H, N, M]`` probabilities (rows sum to 1).

    Returns:
        Tensor: ``[B']``: ``-sum_k p log p`` averaged over heads and
        queries (float64); ``log M`` for uniform rows, 0 for one-hot ones.
    """
    if probs.dim() != 4:
        raise ValueError('attention_entropy needs probabilities of shape '
                         f'[B, H, N, M], got {tuple(probs.shape)}.')
    p = probs.detach().double()
    return -torch.special.xlogy(p, p).sum(-1).mean(dim=(1, 2))
