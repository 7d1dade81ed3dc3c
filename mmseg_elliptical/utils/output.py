"""What the command-line tools write: markdown tables, figures, files
(matplotlib's pyplot is loaded by the first figure: :func:`pyplot`)."""
import csv
import io
import json
import math
import os
import os.path as osp
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image
from prettytable import PrettyTable, TableStyle

Rows = Sequence[Sequence[Any]]


def markdown_table(header: Sequence[str],
                   rows: Rows,
                   spec: Union[str, Sequence[str]] = '.3f',
                   left: int = 1) -> str:
    """A markdown table (prettytable's ``MARKDOWN`` style): the first
    ``left`` columns left-aligned (labels), the others right-aligned.

    Args:
        header (Sequence[str]): Column titles (distinct).
        rows (Sequence[Sequence]): Cells; None and NaN are shown as ``-``.
        spec (str or Sequence[str]): Format of float cells, for every column
            or one per column.
        left (int): Number of leading left-aligned columns.
    """
    specs = [spec] * len(header) if isinstance(spec, str) else list(spec)
    if len(specs) != len(header):
        raise ValueError(f'markdown_table: {len(specs)} formats for '
                         f'{len(header)} columns.')

    def formatter(spec: str) -> Callable[[str, Any], str]:

        def cell(_: str, value: Any) -> str:
            if value is None or (isinstance(value, float)
                                 and math.isnan(value)):
                return '-'
            return format(value, spec) if isinstance(value,
                                                     float) else str(value)

        return cell

    table = PrettyTable(list(header))
    table.set_style(TableStyle.MARKDOWN)
    for i, name in enumerate(table.field_names):
        table.custom_format[name] = formatter(specs[i])
        table.align[name] = 'l' if i < left else 'r'
    table.add_rows([list(row) for row in rows])
    return table.get_string() + '\n'


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend, imported
    here, at the first figure: not at ``import mmseg_elliptical`` (the
    evidence hook draws), nor before a tool's checks."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def wrap_label(name: str, width: int) -> str:
    """``name`` (e.g. a config file name) in lines of at most ``width``
    characters, broken after ``_ - / .`` or a space where there is one."""
    lines = ['']
    for piece in re.findall(r'[^_\-/. ]*[_\-/. ]?', name):
        while piece:
            room = width - len(lines[-1])
            if len(piece) <= room:
                lines[-1] += piece
                piece = ''
            elif lines[-1]:
                lines.append('')
            else:
                lines[-1], piece = piece[:width], piece[width:]
    return '\n'.join(line.rstrip() for line in lines if line)


def _png(fig, dpi: int) -> io.BytesIO:
    """The figure as PNG cut to its content, in memory; closes it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=dpi, bbox_inches='tight')
    pyplot().close(fig)
    buffer.seek(0)
    return buffer


def figure_array(fig, dpi: int = 100) -> np.ndarray:
    """A matplotlib figure as an RGB ``uint8`` array ``[H, W, 3]``, cut to
    its content as :func:`save_figure` saves it; closes it."""
    rgba = pyplot().imread(_png(fig, dpi))
    return (rgba[..., :3] * 255).round().astype(np.uint8)


def save_figure(fig, path: str, dpi: int = 110, compact: bool = False) -> None:
    """Save a matplotlib figure as PNG and close it.

    Args:
        fig (matplotlib.figure.Figure): The figure.
        path (str): PNG file; its folder is created.
        dpi (int): Resolution.
        compact (bool): Quantise to 256 colours (noisy images compress
            badly).
    """
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    if compact:
        Image.open(_png(fig, dpi)).convert('RGB').quantize(256).save(
            path, optimize=True)
        return
    fig.savefig(path, dpi=dpi, bbox_inches='tight')
    pyplot().close(fig)


def write_report(out_dir: str,
                 stem: str,
                 data: Optional[Dict] = None,
                 markdown: Optional[str] = None,
                 table: Optional[Tuple[Sequence[str], Rows]] = None,
                 figure: Any = None) -> List[str]:
    """Write ``<out_dir>/<stem>.{json,md,csv,png}``, each when given.

    Args:
        out_dir (str): Output folder, created when missing.
        stem (str): File name without extension.
        data (dict, optional): Written as JSON.
        markdown (str, optional): The human-readable report.
        table (tuple, optional): ``(header, rows)`` of the CSV file.
        figure (matplotlib.figure.Figure, optional): Saved as PNG, closed.

    Returns:
        list[str]: The files written.
    """
    os.makedirs(out_dir, exist_ok=True)
    base = osp.join(out_dir, stem)
    written = []
    if data is not None:
        with open(f'{base}.json', 'w') as f:
            json.dump(data, f, indent=1)
        written.append(f'{base}.json')
    if markdown is not None:
        with open(f'{base}.md', 'w') as f:
            f.write(markdown)
        written.append(f'{base}.md')
    if table is not None:
        with open(f'{base}.csv', 'w', newline='') as f:
            writer = csv.writer(f)
            writer.writerow(table[0])
            writer.writerows(table[1])
        written.append(f'{base}.csv')
    if figure is not None:
        save_figure(figure, f'{base}.png')
        written.append(f'{base}.png')
    return written
