"""Moved: `python -m planet_tfa.drivers.collect` is now `python -m planet_tfa.programs.collect`."""
import sys

MESSAGE = ('planet_tfa.drivers.collect moved: run `python -m planet_tfa.programs.collect` with the same flags '
           '(issue 15 gathered the programs in planet_tfa/programs/).')

if __name__ == '__main__':
  print(f'error: {MESSAGE}', file=sys.stderr)
  sys.exit(2)
raise ImportError(MESSAGE)
