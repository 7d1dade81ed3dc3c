"""What the attention kinds share besides the method: their options, the
record of what an attention computed, head splitting and relative position
biases."""
from dataclasses import dataclass, field
from typing import List, Tuple

from torch import Tensor

from ..checks import check_estimator_args


def split_heads(x: Tensor, parts: int, num_heads: int) -> Tuple[Tensor, ...]:
    """Split ``[B, N, parts * C]`` into ``parts`` tensors ``[B, H, N, d]``."""
    B, N, C = x.shape
    x = x.view(B, N, parts, num_heads, C // (parts * num_heads))
    return x.permute(2, 0, 3, 1, 4).unbind(0)


def relative_position_bias(table: Tensor, index: Tensor) -> Tensor:
    """mmseg's relative position bias ``[H, N, N]`` of BEiT and Swin, in one
    ``index_select`` (mmseg's lookup then permute makes a second tensor).

    Args:
        table (Tensor): ``relative_position_bias_table`` ``[L, H]``.
        index (Tensor): ``relative_position_index`` ``[N, N]``.
    """
    return table.t().index_select(1, index.view(-1)).view(-1, *index.shape)


@dataclass
class AttentionRecord:
    """What an attention computed, recorded on demand (see ``analysis``).

    Attributes:
        probs (list[Tensor]): Probabilities ``[B', H, N, M]`` of each call,
            before dropout (explicit path only).
        relevance (list[Tensor]): ``m`` ``[B, H, 1, d]`` of each call that
            scored elliptically.
        to_cpu (bool): Move what is recorded to the CPU.
    """
    probs: List[Tensor] = field(default_factory=list)
    relevance: List[Tensor] = field(default_factory=list)
    to_cpu: bool = False

    def keep(self, what: str, tensor: Tensor) -> None:
        """Append a detached ``tensor`` to the list ``what``; a 5-D one
        (Swin's windows per image) with its batch dimensions flattened."""
        tensor = tensor.detach()
        if tensor.dim() == 5:
            tensor = tensor.flatten(0, 1)
        getattr(self, what).append(tensor.cpu() if self.to_cpu else tensor)


class AttentionOptions:
    """The options of an elliptical attention, mixed in before the mmseg /
    mmcv class, whose arguments it passes on.

    Args:
        elliptical (bool): Score with ``m`` when the previous layer's values
            are given; False: dot-product scores, values still handed on.
        relevance_reduction (str): ``'mean'`` or ``'median'`` over tokens.
        relevance_eps (float): Guard of the max-normalisation.

    Attributes:
        fused_attn (bool): False: always the explicit path.
        adaptive (bool): True: the gradient flows through ``m`` and the
            values handed on (adaptive attacks: ``adaptive_relevance``).
        attention_record (AttentionRecord, optional): When set, each call
            keeps ``m`` and (explicit path) the probabilities in it through
            ``self.record``.
    """
    OWN_ARGS = ('elliptical', 'relevance_reduction', 'relevance_eps')

    def __init__(self,
                 *args,
                 elliptical: bool = True,
                 relevance_reduction: str = 'mean',
                 relevance_eps: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_elliptical(elliptical, relevance_reduction, relevance_eps)

    def init_elliptical(self,
                        elliptical: bool = True,
                        relevance_reduction: str = 'mean',
                        relevance_eps: float = 1e-6) -> None:
        """Set the options; takes the class's own arguments
        (:attr:`OWN_ARGS`), as every ``init_elliptical`` does."""
        self.relevance_eps = check_estimator_args(relevance_reduction,
                                                  relevance_eps)
        self.relevance_reduction = relevance_reduction
        self.elliptical = bool(elliptical)
        self.fused_attn = True
        self.adaptive = False
        self.attention_record = None

    def record(self, what: str, tensor: Tensor) -> None:
        """Keep ``tensor`` in :attr:`attention_record`'s list ``what``, when
        one is set."""
        if self.attention_record is not None:
            self.attention_record.keep(what, tensor)

    def extra_repr(self) -> str:
        parent = super().extra_repr()
        mine = (f'elliptical={self.elliptical}, relevance_reduction='
                f'{self.relevance_reduction!r}, relevance_eps='
                f'{self.relevance_eps}, fused_attn={self.fused_attn}')
        return f'{parent}, {mine}' if parent else mine
