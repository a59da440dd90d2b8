"""Gin bindings that no longer exist -> what replaced them.

Gin files written for an older version fail at start with the new name instead
of a bare "unknown parameter", and a run's own operative_config.gin written by
an older version is upgraded on load (`config.upgrade_renamed`). One table, so
every rename lands in one place.
"""

RENAMED_BINDINGS = {
    'make_experience_table.stride_length': 'window_stride.stride_length',
    'ReverbEpisodeObserver.stride_length': 'window_stride.stride_length',
    'capacity_in_items.stride_length': 'window_stride.stride_length',
    'capacity_in_items.capacity_env_steps': 'make_experience_table.capacity_env_steps',
    # Issue 15: what every role shares moved from the learner to the Experiment.
    'train_eval.env_loader': 'Experiment.env_loader',
    'train_eval.seed': 'Experiment.seed',
    'train_eval.sequence_length': 'Experiment.sequence_length',
}
