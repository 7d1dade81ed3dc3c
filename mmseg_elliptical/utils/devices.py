"""Whether the GPU of ``--device`` is there, checked once torch is
imported (:func:`.arguments.device` checks the spelling, before)."""
import argparse

import torch


def check_device(parser: argparse.ArgumentParser, device: str) -> None:
    """Refuse ``cuda`` or ``cuda:N`` without that GPU, as argparse refuses
    ``--device`` (exit status 2)."""
    if not device.startswith('cuda'):
        return
    count = torch.cuda.device_count()
    index = int(device.split(':')[1]) if ':' in device else 0
    if not torch.cuda.is_available() or index >= count:
        parser.error(f'argument --device: {device} is not available here '
                     f'({count} CUDA devices); use --device cpu')
