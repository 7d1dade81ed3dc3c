"""Parameters and FLOPs with ``mmengine.analysis``, plus a handle for
``aten::scaled_dot_product_attention``, which mmengine would skip."""
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape


def sdpa_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-adds of ``scaled_dot_product_attention``: ``QK^T`` and
    ``PV``, i.e. ``B H N M (d + d_v)``."""
    q, k, v = (get_shape(t) for t in inputs[:3])
    batch = int(np.prod(q[:-2]))
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


ATTENTION_HANDLES = {
    'aten::scaled_dot_product_attention': sdpa_flop_jit,
}


def count_params(model: nn.Module) -> int:
    """Number of parameters (``mmengine.analysis.parameter_count``)."""
    return int(parameter_count(model)[''])


@torch.no_grad()
def count_flops(model: nn.Module,
                x: torch.Tensor) -> Tuple[int, Dict[str, int]]:
    """FLOPs of one forward ``model(x)`` (1 multiply-add = 1), attention
    included.

    Args:
        model (nn.Module): The module, in its current mode.
        x (Tensor): Input batch.

    Returns:
        tuple[int, dict[str, int]]: The total and the operators still
        uncounted (name: calls).
    """
    analyzer = FlopAnalyzer(model, (x, ))
    analyzer.set_op_handle(**ATTENTION_HANDLES)
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    return int(analyzer.total()), dict(analyzer.unsupported_ops())
