"""Seeds: the arms (runs of one model name) and their verdicts, means and
report; the validation histories of runs over seeds."""
