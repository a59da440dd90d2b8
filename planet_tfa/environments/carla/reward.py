"""Reward terms and why an episode ends (terminal or truncation)."""
import collections

import numpy as np
from tf_agents.trajectories import time_step as ts

COLLISION = 'collision'
OFF_ROAD = 'off_road'
STUCK = 'stuck'
TIME_LIMIT = 'time_limit'
SIMULATOR_ERROR = 'simulator_error'  # why an episode was cut short (CarlaEnv: 'cut_short')
# Only these end the MDP (discount 0). 'stuck' and 'time_limit' are cut-offs
# of a process that would go on, so they bootstrap (discount 1).
TERMINAL_REASONS = (COLLISION, OFF_ROAD)


def reward_terms(progress_m, speed, collided, lateral_offset, steer, previous_steer,
                 target_speed=8.0, step_seconds=0.1, lane_threshold=1.0,
                 collision_penalty=50.0, lane_departure_weight=1.0, jerk_weight=0.5,
                 overspeed_weight=1.0, step_cost=0.0, stuck_penalty=0.0, replan_penalty=0.0,
                 blocked=False):
  """Reward components of one env step; see compute_reward.

  progress: metres gained along the route, capped at what target_speed covers
    in the step and divided by it, so driving at the target earns 1 per step
    and speeding earns nothing extra; reversing along the route costs.
  overspeed: -(speed above target) / target.
  collision: -collision_penalty when the collision sensor fired this step.
  lane_departure: -weight * metres of |lateral offset| beyond lane_threshold.
  steering_jerk: -weight * |steer_t - steer_{t-1}|; smooth steering helps
    the learnt model and the passengers.
  step_cost: -step_cost every step (standing still is not free), except while
    `blocked` (a car or a red light close ahead: waiting there is legitimate).
  (stuck_penalty and replan_penalty are added by the env: `stuck_term`,
  `replan_term`.)
  """
  del stuck_penalty, replan_penalty
  max_progress = target_speed * step_seconds
  return collections.OrderedDict(
      progress=float(np.clip(progress_m, -max_progress, max_progress) / max_progress),
      overspeed=-overspeed_weight * max(speed - target_speed, 0.0) / target_speed,
      collision=-float(collision_penalty) if collided else 0.0,
      lane_departure=-lane_departure_weight * max(abs(lateral_offset) - lane_threshold, 0.0),
      steering_jerk=-jerk_weight * abs(steer - previous_steer),
      step_cost=0.0 if blocked else -float(step_cost))


def stuck_term(reason, stuck_penalty):
  """-stuck_penalty on the step that ends an episode 'stuck', else 0."""
  return -float(stuck_penalty) if reason == STUCK else 0.0


def replan_term(replanned, replan_penalty):
  """-replan_penalty on a step where the ego left the planned route for another lane."""
  return -float(replan_penalty) if replanned else 0.0


def compute_reward(*args, **kwargs):
  """Sum of reward_terms(...) (same arguments)."""
  return float(sum(reward_terms(*args, **kwargs).values()))


def update_slow_steps(slow_steps, speed, stuck_speed, blocked=False):
  """Counts consecutive steps slower than stuck_speed with nothing blocking the ego.

  0 once moving again, and while `blocked`: queued behind a car or waiting at a
  red light is not being stuck (the autopilot waits there too).
  """
  return slow_steps + 1 if speed < stuck_speed and not blocked else 0


def is_blocked(front_distance, red_light_distance, wait_distance):
  """A car or a red light's stop line within `wait_distance` metres ahead (None/0: never)."""
  if not wait_distance:
    return False
  return min(front_distance, red_light_distance) <= wait_distance


def is_off_road(lateral_offset, off_road_distance, on_driving_lane=True):
  return (not on_driving_lane) or abs(lateral_offset) > off_road_distance


def termination_reason(collided, off_road, slow_steps, step_count, stuck_steps=100,
                       max_steps=1000):
  """Why the episode ends now: None, 'collision', 'off_road', 'stuck' or 'time_limit'.

  Checked in that order, so a crash on the last step is still a crash.
  stuck_steps / max_steps of 0 or None disable that rule.
  """
  if collided:
    return COLLISION
  if off_road:
    return OFF_ROAD
  if stuck_steps and slow_steps >= stuck_steps:
    return STUCK
  if max_steps and step_count >= max_steps:
    return TIME_LIMIT
  return None


def make_time_step(observation, reward, reason, terminal_reasons=TERMINAL_REASONS):
  """MID for no reason; LAST with discount 0 for terminal reasons, else discount 1.

  Truncations (time limit, stuck) keep discount 1 so the critic bootstraps
  instead of learning a false terminal value.
  """
  reward = np.asarray(reward, np.float32)
  if reason is None:
    return ts.transition(observation, reward, discount=1.0)
  if reason in terminal_reasons:
    return ts.termination(observation, reward)
  return ts.truncation(observation, reward, discount=1.0)
