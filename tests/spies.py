"""Spies of the tests: what autograd saves, which aten ops run, which of them
read a device tensor's values on the host.

``ShapeSpy`` and ``HostReads`` are ``TorchDispatchMode`` s (a private torch
API: ``torch.utils._python_dispatch``); the rest uses
``torch.autograd.graph.saved_tensors_hooks``.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def saved_bytes(fn):
    """Bytes of the tensors autograd saves for the backward of ``fn()``,
    and what ``fn`` returned."""
    from torch.autograd.graph import saved_tensors_hooks
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(sizes), out


def saved_scores_bytes(model, x, n: int) -> int:
    """Bytes of the distinct ``[..., n, n]`` tensors (attention scores or
    probabilities) that a training forward of ``model`` saves."""
    from torch.autograd.graph import saved_tensors_hooks
    squares = {}

    def pack(t):
        if t.shape[-2:] == (n, n):
            squares[t.untyped_storage().data_ptr()] = t.nbytes
        return t

    model.train()
    with saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(squares.values())


class ShapeSpy(TorchDispatchMode):
    """Records the aten ops that run and the shapes of what they return."""

    def __init__(self):
        super().__init__()
        self.shapes, self.ops = [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        self.shapes += [
            tuple(t.shape) for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor)
        ]
        return out

    def fused(self) -> bool:
        """Whether attention ran in SDPA's flash kernel only (its math
        fallback would run a softmax)."""
        return ('aten._scaled_dot_product_flash_attention_for_cpu' in self.ops
                and 'aten._softmax' not in self.ops)


# Ops that copy a device tensor's values to the host (a synchronisation on
# a GPU): Python scalars from tensors, and outputs sized by values.

# Ops that copy a device tensor's values to the host (a synchronisation on
# a GPU): Python scalars from tensors, and outputs sized by values.
HOST_READS = ('aten._local_scalar_dense', 'aten.nonzero', 'aten.masked_select',
              'aten.unique_dim', 'aten._unique2', 'aten.item')


class HostReads(TorchDispatchMode):
    """Records the ops of :data:`HOST_READS` that run (on any device): the
    CPU stand-in of ``torch.cuda.set_sync_debug_mode('error')``."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket) in HOST_READS:
            self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))
