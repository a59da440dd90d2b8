"""`python -m bench`: the benchmark suite (see bench/suite.py)."""
import sys

from bench import suite

if __name__ == '__main__':
  sys.exit(suite.main())
