"""A hook that ends a run with a summary: the IoU table and a picture."""
import os.path as osp
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import mmcv
import numpy as np
import torch
import torch.nn.functional as F
from mmengine.dist import master_only
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.structures import PixelData
from mmseg.registry import HOOKS
from mmseg.structures import SegDataSample
from prettytable import PrettyTable

GAP = 4  # white pixels between two scenes of the picture
ROWS = ('image', 'ground\ntruth', 'prediction')  # the picture's rows
FONT = cv2.FONT_HERSHEY_SIMPLEX  # mmseg's visualizer writes with it too
FONT_SCALE = 0.45  # about 10 pixels high


@HOOKS.register_module()
class SegSummaryHook(Hook):
    """Print the per-class IoU table and draw predictions at the end.

    During every validation (and test) the hook keeps the model's outputs
    for the first ``num_scenes`` images; after it, it draws them with the
    runner's visualizer (mmseg's ``SegLocalVisualizer.add_datasample``, the
    drawing of ``tools/test.py --show-dir``) into one picture, a column per
    scene with the image on top, the ground truth in the middle and the
    prediction at the bottom, saved as ``work_dir/out_file``. The image is the
    one the model was given when it has the prediction's size (so a
    corrupting transform shows), else the file at ``img_path``. When training
    ends (or a test), it prints the last metrics as a table: the IoU of every
    class when the evaluator returns ``IoU.<class>`` (as
    :class:`PerClassIoUMetric` does), then mIoU, aAcc and mAcc, the picture's
    path and the run time.

    Args:
        num_scenes (int): Scenes drawn (on rank 0).
        scale (int): Nearest-neighbour upscaling of small images.
        out_file (str): The picture, relative to the work dir.
        with_labels (bool): Name the rows and add a legend of the classes'
            colours (the masks carry no text: mmseg's white names are
            unreadable on light class colours).
        expected (dict, optional): Metric name to the ``(low, high)`` range
            a run of this config is expected to end in; the summary prints
            it beside the run's own value, and whether the value is inside.
        expected_note (str): Where the range comes from (printed with it).
    """
    priority = 'LOW'

    def __init__(self,
                 num_scenes: int = 6,
                 scale: int = 3,
                 out_file: str = 'predictions.png',
                 with_labels: bool = True,
                 expected: Optional[Dict[str, Sequence[float]]] = None,
                 expected_note: str = '') -> None:
        if not (isinstance(num_scenes, int) and num_scenes > 0):
            raise ValueError(f'SegSummaryHook: num_scenes={num_scenes!r} '
                             'must be a positive integer.')
        if not (isinstance(scale, int) and scale > 0):
            raise ValueError(f'SegSummaryHook: scale={scale!r} must be a '
                             'positive integer (1 keeps the image size).')
        self.expected = _ranges(expected or {})
        self.expected_note = expected_note
        self.num_scenes = num_scenes
        self.scale = scale
        self.out_file = out_file
        self.with_labels = with_labels
        self._outputs: List[Tuple[Optional[torch.Tensor], SegDataSample]] = []
        self._metrics: Optional[Dict[str, float]] = None
        self._picture: Optional[str] = None
        self._drawn = 0
        self._start = time.perf_counter()

    def before_run(self, runner) -> None:
        self._start = time.perf_counter()

    def before_val_epoch(self, runner) -> None:
        self._outputs = []

    def before_test_epoch(self, runner) -> None:
        self._outputs = []

    def _keep(self, data_batch: Optional[dict],
              outputs: Optional[Sequence[SegDataSample]]) -> None:
        outputs = outputs or []
        inputs = (data_batch or {}).get('inputs') or [None] * len(outputs)
        for img, sample in zip(inputs, outputs):
            if len(self._outputs) < self.num_scenes:
                self._outputs.append((img, sample))

    def after_val_iter(self,
                       runner,
                       batch_idx: int,
                       data_batch: Optional[dict] = None,
                       outputs: Optional[Sequence] = None) -> None:
        self._keep(data_batch, outputs)

    def after_test_iter(self,
                        runner,
                        batch_idx: int,
                        data_batch: Optional[dict] = None,
                        outputs: Optional[Sequence] = None) -> None:
        self._keep(data_batch, outputs)

    def after_val_epoch(self,
                        runner,
                        metrics: Optional[Dict[str, float]] = None) -> None:
        self._metrics = metrics
        self.draw(runner)

    def after_test_epoch(self,
                         runner,
                         metrics: Optional[Dict[str, float]] = None) -> None:
        self._metrics = metrics
        self.draw(runner)
        self.report(runner, 'test')

    def after_train(self, runner) -> None:
        self.report(runner, 'validation')

    @property
    def picture_path(self) -> Optional[str]:
        """Where the picture was last written (None before)."""
        return self._picture

    def _upscaled(self, seg: PixelData) -> PixelData:
        data = seg.data[None].float()
        data = F.interpolate(data, scale_factor=self.scale, mode='nearest')
        return PixelData(data=data[0].to(torch.int64))

    @master_only
    def draw(self, runner) -> None:
        """Draw the kept outputs into ``work_dir/out_file``."""
        kept = [(img, s) for img, s in self._outputs
                if 'pred_sem_seg' in s and 'gt_sem_seg' in s]
        if not kept:
            return
        visualizer = runner.visualizer
        columns = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, (img, sample) in enumerate(kept):
                img = _image(img, sample)
                img = mmcv.imrescale(img, self.scale, interpolation='nearest')
                drawn = SegDataSample(
                    gt_sem_seg=self._upscaled(sample.gt_sem_seg),
                    pred_sem_seg=self._upscaled(sample.pred_sem_seg))
                out = osp.join(tmp, f'{i}.png')
                visualizer.add_datasample(
                    osp.basename(sample.img_path),
                    img,
                    drawn,
                    draw_gt=True,
                    draw_pred=True,
                    out_file=out,
                    with_labels=False)
                gt, pred = np.split(mmcv.imread(out), 2, axis=1)
                column = [mmcv.rgb2bgr(img), gt, pred]
                columns.append(_stack(column, axis=0))
        picture = _stack(columns, axis=1)
        if self.with_labels:
            meta = visualizer.dataset_meta or {}
            classes, palette = meta.get('classes') or (), \
                meta.get('palette') or ()
            shown = sorted({
                int(c)
                for _, s in kept
                for seg in (s.gt_sem_seg, s.pred_sem_seg)
                for c in seg.data.unique()
                if int(c) < min(len(classes), len(palette))
            })
            picture = _labelled(picture, columns[0].shape[0] - 2 * GAP,
                                [(classes[c], palette[c]) for c in shown])
        self._drawn = len(kept)
        self._picture = osp.join(runner.work_dir, self.out_file)
        mmcv.imwrite(picture, self._picture, [cv2.IMWRITE_PNG_COMPRESSION, 9])

    @master_only
    def report(self, runner, split: str) -> None:
        """Print the last metrics, the picture's path and the run time."""
        if not self._metrics:
            return
        metrics = self._metrics
        classes = (runner.visualizer.dataset_meta or {}).get('classes', ())
        table = PrettyTable(['Class', 'IoU'])
        table.align['Class'] = 'l'
        rows = [[name, metrics[f'IoU.{name}']] for name in classes
                if f'IoU.{name}' in metrics]
        if rows:
            rows[-1].append(True)  # a rule under the classes
        rows += [[key, metrics[key]] for key in ('mIoU', 'aAcc', 'mAcc')
                 if key in metrics]
        for name, value, *divider in rows:
            table.add_row([name, f'{value:.2f}'], divider=bool(divider))
        lines = [
            f'Summary ({split}, iteration {runner.iter}, '
            f'{_minutes(time.perf_counter() - self._start)} since start):',
            table.get_string()
        ]
        if self.picture_path:
            lines.append(f'Predictions of {self._drawn} {split} '
                         'scenes (top: image, middle: ground truth, bottom: '
                         f'prediction): {_shown(self.picture_path)}')
        lines += [
            _against(key, metrics[key], low, high, self.expected_note)
            for key, (low, high) in self.expected.items() if key in metrics
        ]
        print_log('\n'.join(lines), logger='current')


def _ranges(expected: Dict[str, Sequence[float]]) -> Dict[str, tuple]:
    """``expected`` checked: each value a ``(low, high)`` pair of numbers
    with ``low <= high``."""
    out = {}
    for key, bounds in expected.items():
        try:
            low, high = (float(b) for b in bounds)
        except (TypeError, ValueError):
            low = high = float('nan')
        if not low <= high:
            raise ValueError(f'SegSummaryHook: expected[{key!r}]={bounds!r} '
                             'must be a (low, high) pair with low <= high, '
                             'e.g. expected=dict(mIoU=(82.5, 85.5)).')
        out[key] = (low, high)
    return out


def _against(key: str, value: float, low: float, high: float,
             note: str) -> str:
    """The line that puts a run's ``value`` beside its expected range."""
    where = ('inside'
             if low <= value <= high else 'below' if value < low else 'above')
    return (f'Expected {key}: {low:.2f} to {high:.2f}'
            f'{f" ({note})" if note else ""}; this run: {value:.2f}, {where} '
            'the range.')


def _image(batch_input: Optional[torch.Tensor],
           sample: SegDataSample) -> np.ndarray:
    """The RGB image the model was given, or else the file it came from.

    The batch input (``C, H, W``, in the BGR order of mmcv's loader) is used
    when it has the prediction's size, so a transform in the pipeline (e.g.
    a corruption) shows; otherwise the file at ``img_path`` is read, as
    mmseg's ``SegVisualizationHook`` does.
    """
    shape = tuple(sample.pred_sem_seg.shape)
    if batch_input is not None and tuple(batch_input.shape[1:]) == shape:
        bgr = batch_input.detach().cpu().permute(1, 2, 0).numpy()
        return np.ascontiguousarray(bgr[..., ::-1]).astype(np.uint8)
    return mmcv.imread(sample.img_path, channel_order='rgb')


def _stack(images: List[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate images along ``axis`` with white gaps between them."""
    pad = [(0, 0)] * 3
    pad[axis] = (0, GAP)
    padded = [np.pad(im, pad, constant_values=255) for im in images[:-1]]
    return np.concatenate(padded + images[-1:], axis=axis)


def _labelled(picture: np.ndarray, rows_height: int,
              legend: List[Tuple[str, Sequence[int]]]) -> np.ndarray:
    """``picture`` (BGR) with the row names in a white margin on its left
    and, in a white strip below, the legend: per class a swatch of its colour
    (RGB, framed in black) and its name in black."""
    row = rows_height // len(ROWS)
    (_, text_h), base = cv2.getTextSize('Ag', FONT, FONT_SCALE, 1)
    line = text_h + base + 4
    margin = 8 + max(
        cv2.getTextSize(part, FONT, FONT_SCALE, 1)[0][0] for name in ROWS
        for part in name.split('\n'))
    side = np.full((picture.shape[0], margin, 3), 255, np.uint8)
    for i, name in enumerate(ROWS):
        parts = name.split('\n')
        top = i * (row + GAP) + (row - len(parts) * line) // 2
        for k, part in enumerate(parts):
            cv2.putText(side, part, (4, top + k * line + text_h + 2), FONT,
                        FONT_SCALE, (0, 0, 0), 1, cv2.LINE_AA)
    widths = [
        text_h + 6 + cv2.getTextSize(name, FONT, FONT_SCALE, 1)[0][0]
        for name, _ in legend
    ]
    wider = max([0] + widths) + 8 - margin - picture.shape[1]
    picture = np.pad(
        np.concatenate([side, picture], axis=1),
        ((0, 0), (0, max(wider, 0)), (0, 0)),
        constant_values=255)
    lines, x, entries = 1, 4, []
    for (name, colour), width in zip(legend, widths):
        if x > 4 and x + width + 4 > picture.shape[1]:
            lines, x = lines + 1, 4
        entries.append((name, colour, x, lines - 1))
        x += width + 3 * text_h
    bottom = np.full((lines * line + 8, picture.shape[1], 3), 255, np.uint8)
    for name, colour, x, k in entries:
        y = 6 + k * line
        cv2.rectangle(bottom, (x, y), (x + text_h, y + text_h),
                      tuple(int(c) for c in colour[::-1]), -1)
        cv2.rectangle(bottom, (x, y), (x + text_h, y + text_h), (0, 0, 0), 1)
        cv2.putText(bottom, name, (x + text_h + 6, y + text_h), FONT,
                    FONT_SCALE, (0, 0, 0), 1, cv2.LINE_AA)
    return np.concatenate([picture, bottom], axis=0)


def _shown(path: str) -> str:
    """``path`` relative to the current folder when it lies below it."""
    rel = osp.relpath(path)
    return path if rel.startswith('..') else rel


def _minutes(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f'{minutes} min {seconds:02d} s'
