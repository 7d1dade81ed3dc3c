"""Corruptions (ADE20K-C): the cells, the corrupted pipeline, the verdicts
(P, mPC, rPC, CE, mCE) and the report."""
