"""Worked examples of the user guide (docs/guide/)."""
