"""Attacks, one code for evaluation and training: the cells and radii, the
white-box (PGD, FGSM, SegPGD, CosPGD, APGD) and black-box (Square,
transfer) attacks, their verdicts and report."""
