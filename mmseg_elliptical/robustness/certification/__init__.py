"""Certification by randomised smoothing, per pixel (SegCertify): the
cells, the draws and tests, the loop, the verdicts and the report."""
