"""An image given on the command line, read by OpenCV (apart from
:mod:`.arguments`: the tools that take no image do not import cv2)."""
import argparse

import cv2

from .arguments import existing_file


def image_file(text: str) -> str:
    """An existing file that OpenCV reads as an image."""
    existing_file(text)
    if cv2.imread(text) is None:
        raise argparse.ArgumentTypeError(
            f'{text} cannot be read as an image (jpg, png, ...)')
    return text
