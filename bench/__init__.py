"""lmbridge benchmarks: ``python -m bench`` / ``make bench``."""
