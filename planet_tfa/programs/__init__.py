"""The programs: flags, gin parsing, the log file and exit codes live here only.

  train    the learner (what `train_eval.py` runs)
  serve    a standalone Reverb server for many collectors
  collect  one collector process
  export   policy SavedModels from a run root

Each is `python -m planet_tfa.programs.NAME --help`; `cli` holds what they share.
"""
