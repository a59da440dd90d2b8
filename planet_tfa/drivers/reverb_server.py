"""Moved: `python -m planet_tfa.drivers.reverb_server` is now `python -m planet_tfa.programs.serve`."""
import sys

MESSAGE = ('planet_tfa.drivers.reverb_server moved: run `python -m planet_tfa.programs.serve` with the same flags '
           '(issue 15 gathered the programs in planet_tfa/programs/).')

if __name__ == '__main__':
  print(f'error: {MESSAGE}', file=sys.stderr)
  sys.exit(2)
raise ImportError(MESSAGE)
