"""Gin bindings that no longer exist -> what replaced them.

Gin files written for an older version fail at start with the new name instead
of a bare "unknown parameter", and a run's own operative_config.gin written by
an older version is upgraded on load (`programs.gin_files.upgrade_renamed`). One table, so
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
    # CarlaEnv's flat constructor became settings groups (environments/carla/settings.py);
    # CarlaEnv.seed and CarlaEnv.instance stay.
    'CarlaEnv.host': 'CarlaServer.host',
    'CarlaEnv.port': 'CarlaServer.port',
    'CarlaEnv.tm_port': 'CarlaServer.tm_port',
    'CarlaEnv.port_stride': 'CarlaServer.port_stride',
    'CarlaEnv.timeout_s': 'CarlaServer.timeout_s',
    'CarlaEnv.load_world_timeout_s': 'CarlaServer.load_world_timeout_s',
    'CarlaEnv.check_version': 'CarlaServer.check_version',
    'CarlaEnv.reconnect_attempts': 'CarlaServer.reconnect_attempts',
    'CarlaEnv.reconnect_initial_delay_s': 'CarlaServer.reconnect_initial_delay_s',
    'CarlaEnv.reconnect_max_delay_s': 'CarlaServer.reconnect_max_delay_s',
    'CarlaEnv.reconnect_deadline_s': 'CarlaServer.reconnect_deadline_s',
    'CarlaEnv.town': 'CarlaWorld.town',
    'CarlaEnv.weather': 'CarlaWorld.weather',
    'CarlaEnv.num_vehicles': 'CarlaWorld.num_vehicles',
    'CarlaEnv.ego_blueprint': 'CarlaWorld.ego_blueprint',
    'CarlaEnv.spawn_retries': 'CarlaWorld.spawn_retries',
    'CarlaEnv.fixed_delta_seconds': 'CarlaWorld.fixed_delta_seconds',
    'CarlaEnv.no_rendering_mode': 'CarlaWorld.no_rendering_mode',
    'CarlaEnv.image_size': 'CarlaSensors.image_size',
    'CarlaEnv.camera_fov': 'CarlaSensors.camera_fov',
    'CarlaEnv.meters_per_pixel': 'CarlaSensors.meters_per_pixel',
    'CarlaEnv.ego_position': 'CarlaSensors.ego_position',
    'CarlaEnv.front_max_distance': 'CarlaSensors.front_max_distance',
    'CarlaEnv.sensor_timeout_s': 'CarlaSensors.timeout_s',
    'CarlaEnv.sensor_buffer_size': 'CarlaSensors.buffer_size',
    'CarlaEnv.lidar_range': 'CarlaLidar.range',
    'CarlaEnv.lidar_height': 'CarlaLidar.height',
    'CarlaEnv.lidar_channels': 'CarlaLidar.channels',
    'CarlaEnv.lidar_points_per_second': 'CarlaLidar.points_per_second',
    'CarlaEnv.lidar_upper_fov': 'CarlaLidar.upper_fov',
    'CarlaEnv.lidar_lower_fov': 'CarlaLidar.lower_fov',
    'CarlaEnv.lidar_dropoff_general_rate': 'CarlaLidar.dropoff_general_rate',
    'CarlaEnv.lidar_dropoff_intensity_limit': 'CarlaLidar.dropoff_intensity_limit',
    'CarlaEnv.lidar_dropoff_zero_intensity': 'CarlaLidar.dropoff_zero_intensity',
    'CarlaEnv.lidar_noise_stddev': 'CarlaLidar.noise_stddev',
    'CarlaEnv.ground_tolerance': 'CarlaLidar.ground_tolerance',
    'CarlaEnv.max_obstacle_height': 'CarlaLidar.max_obstacle_height',
    'CarlaEnv.route_spacing': 'CarlaRoute.spacing',
    'CarlaEnv.route_lookahead': 'CarlaRoute.lookahead',
    'CarlaEnv.route_replan_distance': 'CarlaRoute.replan_distance',
    'CarlaEnv.road_spacing': 'CarlaRoute.road_spacing',
    'CarlaEnv.target_speed': 'CarlaReward.target_speed',
    'CarlaEnv.lane_threshold': 'CarlaReward.lane_threshold',
    'CarlaEnv.collision_penalty': 'CarlaReward.collision_penalty',
    'CarlaEnv.lane_departure_weight': 'CarlaReward.lane_departure_weight',
    'CarlaEnv.jerk_weight': 'CarlaReward.jerk_weight',
    'CarlaEnv.overspeed_weight': 'CarlaReward.overspeed_weight',
    'CarlaEnv.action_repeat': 'CarlaEpisode.action_repeat',
    'CarlaEnv.max_steps': 'CarlaEpisode.max_steps',
    'CarlaEnv.off_road_distance': 'CarlaEpisode.off_road_distance',
    'CarlaEnv.stuck_speed': 'CarlaEpisode.stuck_speed',
    'CarlaEnv.stuck_steps': 'CarlaEpisode.stuck_steps',
    'CarlaEnv.terminal_reasons': 'CarlaEpisode.terminal_reasons',
    # The module carla_env became the package carla.
    'carla_env.observation_spec.image_size':
        'carla.specs.observation_spec.image_size',
    'carla_env.observation_spec.state_size':
        'carla.specs.observation_spec.state_size',
}
