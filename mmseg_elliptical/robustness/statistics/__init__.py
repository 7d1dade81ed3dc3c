"""The statistics of every threat's verdicts: summaries, SEA's worst case,
the paired and hierarchical bootstraps, a store's verdicts."""
