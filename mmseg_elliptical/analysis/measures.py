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
