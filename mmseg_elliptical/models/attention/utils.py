"""What the attention kinds share besides the method: relative position
biases and the record of what an attention computed."""
from dataclasses import dataclass, field
from typing import List

from torch import Tensor


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
        """Append a detached ``tensor`` to the list ``what``."""
        tensor = tensor.detach()
        getattr(self, what).append(tensor.cpu() if self.to_cpu else tensor)
