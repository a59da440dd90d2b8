"""PlaNet's planner as a TF-Agents policy: the cross-entropy method in the latent model.

`CemPlanningPolicy` carries the same `policy_state` as `LatentActorPolicy`
({'deter', 'stoch', 'prev_action'}, zeros at FIRST) and filters each new
observation with the same `RssmEncodingNetwork` step, so either policy can
stand in for the other in drivers, collectors and exports. Only the way the
action is chosen differs. From the filtered belief, every action:

  mean, std = middle of the action box, half its width        [B, H, A]
  repeat `iterations` times:
    candidate_actions ~ clip(N(mean, std))                    [B, N, H, A]
    roll each sequence open loop through the RSSM prior, from the belief,
    and score it: sum_t discount^t alive_t reward_head(s_{t+1})
                  (+ discount^H alive_H V(s_H) with a terminal value) -> [B, N]
    alive_t: the probability, by the world model's continuation head, that the
    episode has not ended before arriving at s_{t+1} (1 without the head)
    mean, std = moments of the `top_k` best sequences
  action = mean[:, 0] (greedy), + Gaussian exploration noise (collect).

All B * N rollouts of an iteration run as one batch. The reward head at an
imagined state predicts the reward of *arriving* there (the world model's
convention), so the reward of action t is read at the state after it.

Actor guidance (optional): `actor_share` of the first iteration's candidates
are the SAC actor rolled through the imagined latents (the first one with the
actor's mode, the rest sampled), and `terminal_value` adds the critic's value
of the last imagined state, so a short horizon still sees beyond itself.

Randomness: every draw of an action (the posterior sample, the candidate
noise, the imagined priors' samples, the exploration noise) comes from
stateless ops on one seed per action. The greedy variant uses a fixed seed
(`greedy_seed`) and the means of the posterior (unless
`LatentSacAgent.greedy_filter = 'sample'`, whose posterior samples then use
the global random state) and of the imagined priors, so it is a
deterministic function of (observation, state), like the greedy actor
policy, and exports as such. The collect variant draws a fresh seed per call,
or uses `action(..., seed=)` (an integer or a [2] stateless seed: the same
seed, inputs and weights give the same action), samples the posterior and
the imagined priors, and adds Gaussian exploration noise of
`exploration_noise_std` times the action box's half-width to the executed
action (PlaNet: 0.3 on [-1, 1]).

Settings: the gin bindings `CemPlanningPolicy.*` are read by
`planner_settings`, not by the class. `LatentSacAgent` calls it once, at
construction, and builds every planner from what it returned, so a planner
rebuilt later (export, bench scripts) has the run's settings whatever gin
holds by then, and every run's operative_config.gin records them.
"""
import gin
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.trajectories import policy_step

from planet_tfa import errors
from planet_tfa.agents import latent_policy
from planet_tfa.networks import rssm as rssm_lib

TERMINAL_VALUES = (None, 'critic', 'target_critic')


@gin.configurable('CemPlanningPolicy')
def planner_settings(horizon=12, num_candidates=1000, top_k=100, iterations=10,
                     exploration_noise_std=0.3, actor_share=0.0, terminal_value=None,
                     discount=None, greedy_seed=0, name=None):
  """The planner's settings as gin binds them (`CemPlanningPolicy.horizon`, ...):
  keyword arguments of `CemPlanningPolicy`, whose defaults are the same.

  Registered under the planner's name so the bindings keep their names (and
  older runs' operative configs still parse), while the agent reads them once
  (see the module doc).
  """
  return dict(horizon=horizon, num_candidates=num_candidates, top_k=top_k,
              iterations=iterations, exploration_noise_std=exploration_noise_std,
              actor_share=actor_share, terminal_value=terminal_value, discount=discount,
              greedy_seed=greedy_seed, name=name)


def check_config(horizon, num_candidates, top_k, iterations, exploration_noise_std,
                 actor_share, terminal_value, discount, has_actor, has_critics,
                 name='CemPlanningPolicy'):
  """Raises ConfigError naming the gin binding of a planner that cannot work."""
  def positive(param, value):
    if not isinstance(value, int) or value < 1:
      raise errors.ConfigError(
          f'{name}.{param}={value!r}: must be an integer >= 1 (PlaNet: horizon 12, '
          'num_candidates 1000, top_k 100, iterations 10).')
  positive('horizon', horizon)
  positive('num_candidates', num_candidates)
  positive('iterations', iterations)
  positive('top_k', top_k)
  if top_k > num_candidates:
    raise errors.ConfigError(
        f'{name}.top_k={top_k} > {name}.num_candidates={num_candidates}: the elite set '
        f'must come from the candidates; lower top_k or raise num_candidates.')
  if exploration_noise_std < 0:
    raise errors.ConfigError(
        f'{name}.exploration_noise_std={exploration_noise_std}: must be >= 0.')
  if not 0.0 <= actor_share <= 1.0:
    raise errors.ConfigError(
        f'{name}.actor_share={actor_share}: a fraction of the candidates, in [0, 1].')
  if actor_share > 0 and not has_actor:
    raise errors.ConfigError(
        f'{name}.actor_share={actor_share} needs an actor network; none was given.')
  if terminal_value not in TERMINAL_VALUES:
    raise errors.ConfigError(
        f'{name}.terminal_value={terminal_value!r}: choose one of {TERMINAL_VALUES}.')
  if terminal_value is not None and not (has_actor and has_critics):
    raise errors.ConfigError(
        f'{name}.terminal_value={terminal_value!r} needs the actor and critic networks; '
        'none were given.')
  if discount is not None and not 0.0 < discount <= 1.0:
    raise errors.ConfigError(f'{name}.discount={discount}: must be in (0, 1].')


class CemPlanningPolicy(latent_policy.LatentFilterPolicy):
  """Acts by CEM planning in the world model; state and filter as LatentActorPolicy.

  Not gin-configurable itself: its gin bindings are `planner_settings`'s.

  Args:
    time_step_spec, action_spec: as for any TF-Agents policy; the observation
      spec must hold the filter's input keys (it may hold more).
    rssm_network: the agent's `RssmEncodingNetwork` (filter + RSSM).
    reward_head: features [..., F] -> predicted reward [...] (the world
      model's `reward_decoder`).
    actor_network: the SAC actor (needed for `actor_share` or `terminal_value`).
    critics: {'critic': (q1, q2), 'target_critic': (q1', q2')}, the SAC
      critics (needed for `terminal_value`).
    critic_gamma, critic_reward_scale: the SAC discount and reward scale the
      critics were trained with (their value is divided by the scale).
    greedy: the evaluation variant (deterministic) or the collect variant.
    sample_posterior: filter with posterior samples (True) or the posterior
      mean; None: the mean when greedy, as LatentActorPolicy (the agent passes
      its `greedy_filter`).
    horizon, num_candidates, top_k, iterations: the CEM search (PlaNet: 12,
      1000, 100, 10).
    exploration_noise_std: std of the Gaussian noise on the collect variant's
      action, in units of the action box's half-width ((high - low) / 2).
    actor_share: fraction of the first iteration's candidates taken from the
      SAC actor rolled through the imagined latents (0: plain PlaNet).
    terminal_value: None, 'critic' (min of the two critics) or 'target_critic'
      (min of the two target critics) at the last imagined state, taking the
      actor's mode action there.
    discount: per-step discount of a plan's rewards; None: 1 (PlaNet) without a
      terminal value, `critic_gamma` with one.
    greedy_seed: the greedy variant's fixed stateless seed.
    continuation_head: the world model's continuation head (features ->
      logit of going on), or None: rewards and the terminal value past a
      predicted end of the episode count with the probability it has not ended.
  """

  def __init__(self, time_step_spec, action_spec, rssm_network, reward_head,
               actor_network=None, critics=None, critic_gamma=0.99,
               critic_reward_scale=1.0, greedy=True, sample_posterior=None,
               horizon=12, num_candidates=1000,
               top_k=100, iterations=10, exploration_noise_std=0.3, actor_share=0.0,
               terminal_value=None, discount=None, greedy_seed=0, continuation_head=None,
               name=None):
    check_config(horizon, num_candidates, top_k, iterations, exploration_noise_std,
                 actor_share, terminal_value, discount, actor_network is not None,
                 bool(critics))
    if action_spec.shape.rank != 1:
      raise ValueError(f'CemPlanningPolicy plans flat continuous actions [A]; got '
                       f'action shape {action_spec.shape}')
    # Attributes track the networks, so policy.variables() (and the variable
    # sync to remote collectors) holds everything the planner reads.
    self._rssm = rssm_network.rssm
    self._reward_head = reward_head
    self._continuation_head = continuation_head
    uses_actor = actor_share > 0 or terminal_value is not None
    self._actor_network = actor_network if uses_actor else None
    self._value_critics = tuple(critics[terminal_value]) if terminal_value else ()
    self._critic_reward_scale = float(critic_reward_scale)
    self._horizon = horizon
    self._num_candidates = num_candidates
    self._top_k = top_k
    self._iterations = iterations
    self._exploration_noise_std = float(exploration_noise_std)
    self._terminal_value = terminal_value
    # At least one guided candidate when guidance is on at all.
    self._num_actor_candidates = (
        min(num_candidates, max(1, int(round(actor_share * num_candidates))))
        if actor_share > 0 else 0)
    if discount is None:
      discount = critic_gamma if terminal_value else 1.0
    self._discount = float(discount)
    self._greedy_seed = int(greedy_seed)
    self._action_low = tf.broadcast_to(
        tf.constant(action_spec.minimum, tf.float32), action_spec.shape)
    self._action_high = tf.broadcast_to(
        tf.constant(action_spec.maximum, tf.float32), action_spec.shape)
    # Relative to the box, as the initial search distribution is: 0.3 on
    # [-1, 1] is PlaNet's noise, and a box of other bounds gets the same share.
    self._noise_scale = (self._exploration_noise_std
                         * (self._action_high - self._action_low) / 2.0)
    super().__init__(time_step_spec, action_spec, rssm_network, greedy=greedy,
                     sample_posterior=sample_posterior, name=name)

  @property
  def horizon(self):
    return self._horizon

  @property
  def num_candidates(self):
    return self._num_candidates

  @property
  def top_k(self):
    return self._top_k

  @property
  def iterations(self):
    return self._iterations

  @property
  def num_actor_candidates(self):
    return self._num_actor_candidates

  @property
  def exploration_noise_std(self):
    return self._exploration_noise_std

  @property
  def terminal_value(self):
    return self._terminal_value

  @property
  def discount(self):
    return self._discount

  def _variables(self):
    variables = self._rssm_network.variables + list(self._reward_head.variables)
    if self._actor_network is not None:
      variables += self._actor_network.variables
    for critic in self._value_critics:
      variables += critic.variables
    return variables

  def _seed(self, seed):
    """The action's stateless [2] seed: from `seed`, else fixed (greedy) or fresh."""
    if seed is None:
      if self._greedy:
        return tf.constant([self._greedy_seed, 0], tf.int32)
      return tfp.random.sanitize_seed(None)  # fresh per call, also in a SavedModel
    if callable(seed):  # e.g. a tfp.util.SeedStream
      seed = seed()
    # Derived, not sanitize_seed(int): that draws the seed from a stateful op
    # (seeded by the int), a new one at every call.
    if isinstance(seed, int):
      return tf.constant([seed % 2**31, seed // 2**31 % 2**31], tf.int32)
    seed = tf.convert_to_tensor(seed)
    if seed.shape.rank == 0:
      seed = tf.stack([seed, tf.zeros_like(seed)])
    return tf.cast(seed, tf.int32)

  # ---- scoring plans -------------------------------------------------------

  def _actor_mode(self, features):
    distribution, _ = self._actor_network(features, step_type=None, network_state=())
    return distribution.mode()

  def terminal_values(self, features):
    """V(s) ~ min_i Q_i(s, actor mode at s), in reward units: [M, F] -> [M]."""
    action = self._actor_mode(features)
    values = [critic((features, action), step_type=(), network_state=())[0]
              for critic in self._value_critics]
    return tf.reduce_min(tf.stack(values, 0), 0) / self._critic_reward_scale

  def _imagine(self, start, candidate_actions, seed):
    """Features [B*N, H, F] of action sequences [B, N, H, A] imagined from beliefs [B]."""
    shape = tf.shape(candidate_actions)
    batch_size, num = shape[0], shape[1]
    flat_actions = tf.reshape(candidate_actions, [batch_size * num, self._horizon, -1])
    tiled_start = {k: tf.repeat(start[k], num, axis=0) for k in ('deter', 'stoch')}
    imagined = self._rssm.imagine(flat_actions, tiled_start, sample=not self._greedy,
                                  seed=None if self._greedy else seed)
    return rssm_lib.features(imagined), batch_size, num

  def _alive_after(self, imagined_features):
    """P(the episode goes on after each imagined step) [M, H]: 1 without a continuation head."""
    if self._continuation_head is None:
      return tf.ones(tf.shape(imagined_features)[:2])
    return tf.math.cumprod(tf.sigmoid(self._continuation_head(imagined_features)), -1)

  def plan_returns(self, start, candidate_actions, seed=None):
    """Predicted returns [B, N] of action sequences [B, N, H, A] from beliefs [B];
    `seed`: the stateless seed of the collect variant's imagined samples (None:
    the global random state)."""
    imagined_features, batch_size, num = self._imagine(start, candidate_actions, seed)
    rewards = self._reward_head(imagined_features)                # [B*N, H]
    discounts = self._discount ** tf.range(self._horizon, dtype=tf.float32)
    alive_after = self._alive_after(imagined_features)
    # The reward of arriving at a step counts if the episode had not ended before it.
    alive_before = tf.concat([tf.ones_like(alive_after[:, :1]), alive_after[:, :-1]], -1)
    returns = tf.reduce_sum(rewards * discounts * alive_before, -1)  # [B*N]
    if self._value_critics:
      returns += (self._discount ** self._horizon * alive_after[:, -1]
                  * self.terminal_values(imagined_features[:, -1]))
    return tf.reshape(returns, [batch_size, num])

  def plan_survival(self, start, candidate_actions, seed=None):
    """P(the episode still goes on after all H steps) [B, N] of action sequences
    [B, N, H, A] by the continuation head (1 without one)."""
    imagined_features, batch_size, num = self._imagine(start, candidate_actions, seed)
    return tf.reshape(self._alive_after(imagined_features)[:, -1], [batch_size, num])

  def actor_candidates(self, start, num, seed):
    """[B, num, H, A] sequences of the actor rolled through the imagined prior.

    Candidate 0 of each row follows the actor's mode; the rest sample the
    actor's tanh-Gaussian with stateless noise.
    """
    batch_size = tf.shape(start['deter'])[0]
    tiled = {k: tf.repeat(start[k], num, axis=0) for k in ('deter', 'stoch')}
    is_mode = tf.tile(tf.range(num) < 1, [batch_size])[:, None]   # [B*num, 1]
    action_size = self.action_spec.shape[0]

    def step(carry, t):
      state, _ = carry
      distribution, _ = self._actor_network(
          rssm_lib.features(state), step_type=None, network_state=())
      normal = distribution.input_distribution
      step_seed = tf.random.experimental.stateless_fold_in(seed, t)
      noise = tf.random.stateless_normal(tf.shape(normal.mean()), step_seed)
      sampled = (distribution.action_means + distribution.action_magnitudes
                 * tf.tanh(normal.mean() + normal.stddev() * noise))
      action = tf.where(is_mode, distribution.mode(), sampled)
      prior = self._rssm.prior_step(
          state, action, sample=not self._greedy,
          seed=tf.random.experimental.stateless_fold_in(step_seed, 1))
      return {'deter': prior['deter'], 'stoch': prior['stoch']}, action

    initial = (tiled, tf.zeros([batch_size * num, action_size]))
    _, actions = tf.scan(step, tf.range(self._horizon), initializer=initial)  # [H, B*num, A]
    actions = tf.transpose(actions, [1, 0, 2])
    return tf.reshape(actions, [batch_size, num, self._horizon, action_size])

  def plan(self, start, seed):
    """CEM from beliefs {'deter', 'stoch'} [B, ...]: the final (mean, std) [B, H, A]."""
    batch_size = tf.shape(start['deter'])[0]
    plan_shape = tf.stack([batch_size, self._horizon, self.action_spec.shape[0]])
    low, high = self._action_low, self._action_high
    mean = tf.broadcast_to((low + high) / 2.0, plan_shape)
    std = tf.broadcast_to((high - low) / 2.0, plan_shape)
    noise_seed, actor_seed = tfp.random.split_seed(seed, 2)
    num_guided = self._num_actor_candidates
    guided = (self.actor_candidates(start, num_guided, actor_seed)
              if num_guided else None)                            # [B, M, H, A]

    def refit(iteration, mean, std):
      iteration_seed = tf.random.experimental.stateless_fold_in(noise_seed, iteration)
      noise = tf.random.stateless_normal(
          tf.concat([[batch_size, self._num_candidates], plan_shape[1:]], 0),
          iteration_seed)
      candidate_actions = tf.clip_by_value(
          mean[:, None] + std[:, None] * noise, low, high)         # [B, N, H, A]
      if guided is not None:
        # Only the initial population is guided; later ones follow the refit.
        candidate_actions = tf.cond(
            tf.equal(iteration, 0),
            lambda: tf.concat([guided, candidate_actions[:, num_guided:]], 1),
            lambda: candidate_actions)
      returns = self.plan_returns(                                # [B, N]
          start, candidate_actions,
          seed=tf.random.experimental.stateless_fold_in(iteration_seed, 1))
      _, elite_index = tf.math.top_k(returns, self._top_k)        # [B, K] highest returns
      elite_actions = tf.gather(candidate_actions, elite_index, batch_dims=1)  # [B, K, H, A]
      new_mean, variance = tf.nn.moments(elite_actions, axes=[1])
      new_std = tf.sqrt(variance)
      # The gathers lose a static batch size; the loop needs it unchanged.
      new_mean.set_shape(mean.shape)
      new_std.set_shape(std.shape)
      return iteration + 1, new_mean, new_std

    _, mean, std = tf.while_loop(
        lambda iteration, *_: iteration < self._iterations, refit,
        (tf.constant(0), mean, std))
    return mean, std

  # ---- TF-Agents policy interface -------------------------------------------

  def greedy_plan_seed(self):
    """The seed `plan` gets when the greedy planner acts without one: planning
    from a belief with it gives the plan whose first step that planner took."""
    return tfp.random.split_seed(self._seed(None), 2)[0]

  def _planned_action(self, time_step, policy_state, seed):
    action_seed = self._seed(seed)
    plan_seed, noise_seed = tfp.random.split_seed(action_seed, 2)
    # The greedy variant's fixed seed would repeat one posterior draw at every
    # step (greedy_filter='sample'): it samples the filter from the global
    # state unless given a seed.
    filter_seed = (None if self._greedy and seed is None
                   else tf.random.experimental.stateless_fold_in(action_seed, 1))
    _, state = self._filter(time_step, policy_state, filter_seed)
    mean, _ = self.plan({'deter': state['deter'], 'stoch': state['stoch']}, plan_seed)
    return mean[:, 0], state, noise_seed

  def _distribution(self, time_step, policy_state):
    """Plain TFP types (a SavedModel loads without TF-Agents). Like
    LatentActorPolicy's, its state keeps the previous action: step the policy
    with action()."""
    planned, state, _ = self._planned_action(time_step, policy_state, None)
    if self._greedy or self._exploration_noise_std == 0:
      distribution = tfp.distributions.Deterministic(loc=planned)
    else:
      distribution = tfp.distributions.Independent(
          tfp.distributions.Normal(planned, self._noise_scale), 1)
    return policy_step.PolicyStep(distribution, state, ())

  def _action(self, time_step, policy_state, seed=None):
    planned, state, noise_seed = self._planned_action(time_step, policy_state, seed)
    action = planned
    if not self._greedy and self._exploration_noise_std > 0:
      action += self._noise_scale * tf.random.stateless_normal(tf.shape(planned), noise_seed)
    # The executed action (clipped) is what the filter conditions on next.
    action = tf.clip_by_value(action, self._action_low, self._action_high)
    action = tf.cast(action, self.action_spec.dtype)
    state = dict(state, prev_action=tf.cast(action, tf.float32))
    return policy_step.PolicyStep(action, state, ())
