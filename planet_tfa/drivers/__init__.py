"""Moved (issue 15): replay tables, observers and variable sync are in
`planet_tfa.replay`, the episode drivers in `planet_tfa.episodes`, the
collector in `planet_tfa.collector`, and the programs in `planet_tfa.programs`.
The modules left here only say where their commands went."""
