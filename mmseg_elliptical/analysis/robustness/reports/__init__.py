"""Reports: the markdown, CSV and figures of each threat and of arms; they
read the verdicts and compute nothing."""
