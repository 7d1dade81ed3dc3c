"""SEA's worst-case mIoU search transcribed from its released code
(``evalSEA.worst_case_miou`` and its helpers in ``tools/worse_only.py`` of
nmndeep/Robust-Segmentation, torch and Python lists as there), for the tests
of :mod:`mmseg_elliptical.robustness.statistics.sea`. Only the
loading, printing and saving are left out."""
import random
import statistics

import torch


def _compute_miou(inters, union):
    iou = []
    for a, b in zip(inters, union):
        if b == 0:  # Skip empty classes.
            continue
        iou.append(a.item() / b.item())
    return statistics.mean(iou)


def _compute_miou_subtraction(running_int, running_union, inters, union):
    iou = []
    uni = []
    miou = []
    ct = 0
    for a, b, c, d in zip(running_int, running_union, inters, union):
        if b == 0:  # Skip empty classes.
            continue
        iou.append(a.item() + c.item())
        uni.append(b.item() + d.item())
        miou.append(iou[ct] / (uni[ct] + 1e-8))
        ct += 1
    return statistics.mean(miou), iou, uni


def sea_miou_as_released(cons_ints: torch.Tensor,
                         cons_unions: torch.Tensor,
                         seed: int = 225) -> tuple:
    """SEA's search on ``[attacks, images, classes]`` areas, attack 0 being
    MCE-Bal: ``(final mIoU as a fraction, selected attack per image)``."""
    random.seed(seed)
    running_intersection = list(cons_ints[0].sum(0))
    running_union = list(cons_unions[0].sum(0))
    final_miou = _compute_miou(running_intersection, running_union)
    n_rounds = 1000
    selected_attk_indx = [0] * cons_ints.shape[1]
    prev_best = 10
    for rounds in range(n_rounds):
        shuffled_list = list(range(0, cons_ints.shape[1]))
        random.shuffle(shuffled_list)
        for i, idx in enumerate(shuffled_list):
            for attack in range(cons_ints.size(0)):
                est_int = running_intersection.copy()
                est_union = running_union.copy()
                update_int = (
                    cons_ints[attack, idx, :] -
                    cons_ints[selected_attk_indx[idx], idx, :])
                update_union = (
                    cons_unions[attack, idx, :] -
                    cons_unions[selected_attk_indx[idx], idx, :])
                est_miou, new_ints, new_unis = _compute_miou_subtraction(
                    torch.tensor(est_int),
                    torch.tensor(est_union),
                    torch.tensor(update_int),
                    torch.tensor(update_union),
                )
                if est_miou < final_miou:
                    selected_attk_indx[idx] = attack
                    running_intersection = new_ints
                    running_union = new_unis
            final_miou = _compute_miou(
                torch.tensor(running_intersection),
                torch.tensor(running_union),
            )
        if prev_best - final_miou <= 1e-6:
            break
        else:
            prev_best = final_miou
        final_miou = _compute_miou(
            torch.tensor(running_intersection), torch.tensor(running_union))
    return final_miou, selected_attk_indx
