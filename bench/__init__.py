"""lmbridge benchmarks (issue #6): ``python -m bench`` / ``make bench``."""
