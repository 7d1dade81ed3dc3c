"""How :mod:`.core`'s maths meets memory and kernels: where ``m`` scales q or
k and which path runs (what the value chain copies, overwrites or releases:
:class:`~..chain.ChainCall`).

Each rule is there because a CPU measurement showed that it pays
(docs/benchmark.md: "Which kernel", "The inference path and the per-layer
micro-benchmark").
"""
from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

# On the CPU, SDPA has no fused kernel for a mask that needs a gradient or
# for dropout; its math kernel is then slower than the explicit path up to
# about this many keys, faster above.
EXPLICIT_MAX_KEYS = 512


class Scaling(NamedTuple):
    """How ``m`` enters one call's scores (``(q * m) . k = q . (k * m)``).

    Attributes:
        keys (bool): Scale k instead of q.
        own_gemm (bool): q comes from its own GEMM, not from a view of the
            packed qkv projection.
        in_place (bool): Multiply in place.
    """
    keys: bool
    own_gemm: bool
    in_place: bool

    def apply(self, q: Tensor, k: Tensor, m: Tensor) -> Tuple[Tensor, Tensor]:
        """q and k with ``m`` applied to one of them."""
        if self.keys:
            return q, (k.mul_(m) if self.in_place else k * m)
        return (q.mul_(m) if self.in_place else q * m), k


def scaling(num_queries: int, num_keys: int) -> Scaling:
    """The one decision of where and how ``m`` is applied.

    With gradient: ``q * m`` after q's own GEMM (its backward keeps only
    ``m``, not the unscaled q). Without: on the fewer of queries and keys,
    in place when eager; compiled, out of place over q's own buffer (an
    in-place product on a view is functionalised into a copy).

    Args:
        num_queries (int): Query tokens.
        num_keys (int): Key tokens.

    Returns:
        Scaling: The plan.
    """
    if torch.is_grad_enabled():
        return Scaling(keys=False, own_gemm=True, in_place=False)
    compiled = torch.compiler.is_compiling()
    if num_keys < num_queries:
        return Scaling(keys=True, own_gemm=False, in_place=not compiled)
    return Scaling(keys=False, own_gemm=compiled, in_place=not compiled)


class KernelPolicy:
    """The path decision of an attention with ``fused_attn`` and
    ``training`` attributes."""
    fused_attn: bool = True
    training: bool

    def fused_kernel(self, q: Tensor, k: Tensor, bias: Optional[Tensor],
                     dropout_p: float) -> bool:
        """SDPA (True) or the explicit path (False).

        SDPA, unless ``fused_attn`` is off, or on the CPU in training where
        SDPA has no fused kernel (a bias that needs a gradient, dropout) and
        there are at most :data:`EXPLICIT_MAX_KEYS` keys.
        """
        if not self.fused_attn:
            return False
        if q.device.type != 'cpu' or not torch.is_grad_enabled():
            return True
        math = (self.training and dropout_p > 0) or (bias is not None
                                                     and bias.requires_grad)
        return not (math and k.shape[-2] <= EXPLICIT_MAX_KEYS)
