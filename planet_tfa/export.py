"""Moved: `python -m planet_tfa.export` is now `python -m planet_tfa.programs.export`."""
import sys

MESSAGE = ('planet_tfa.export moved: run `python -m planet_tfa.programs.export` with the same flags '
           '(issue 15 gathered the programs in planet_tfa/programs/).')

if __name__ == '__main__':
  print(f'error: {MESSAGE}', file=sys.stderr)
  sys.exit(2)
raise ImportError(MESSAGE)
