"""Latent SAC: a world-model update, then TF-Agents' SacAgent on latent features.

One train step (one `train()` call, one increment of `train_step_counter`) is:
  1. the negative ELBO of a batch of [B, T+1] replay windows -> one world-model
     optimizer step (clipped by global norm);
  2. the posterior features deter||stoch of the same windows, computed in that
     forward pass and `stop_gradient`-ed, form transitions (feat_t, a_t, r_t,
     d_t, feat_{t+1}) for every consecutive pair inside the window -> one
     `SacAgent` step (twin critics, learned temperature). With `td_steps` n > 1
     the target sums the window's next n rewards and bootstraps from
     feat_{t+n} (n-step TD, cut at the episode's and the window's end).
No frame is encoded twice and the next observation comes from the window.
(`train(experience, sac_experience=...)` instead gives SAC its own batch of
windows, encoded without gradients after the model update: SLAC's layout,
which costs a second encoder pass; `train_eval.sac_batch_size` enables it.)

Which pairs feed SAC: the filter starts every window from the zero state,
which is exact when the window starts at an episode's FIRST step but a
cold start in mid-episode. Pairs whose first step is before `sac_burn_in` are
therefore skipped in mid-episode windows (default 3 of the 8 pairs of a 9-step
window; SLAC used only the last pair). Pairs after the episode's LAST step
(padding) are always skipped.
"""
import math
import types

import gin
import tensorflow as tf
from tf_agents.agents import tf_agent
from tf_agents.agents.sac import sac_agent
from tf_agents.agents.sac import tanh_normal_projection_network
from tf_agents.agents.ddpg import critic_network
from tf_agents.networks import actor_distribution_network
from tf_agents.trajectories import policy_step
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory

from planet_tfa import errors
from planet_tfa import setting_values
from planet_tfa.agents import cem_policy
from planet_tfa.agents import latent_policy
from planet_tfa.agents import pessimistic_sac
from planet_tfa.agents import world_model as world_model_lib
from planet_tfa.networks import rssm as rssm_lib
from planet_tfa.networks import rssm_network


POLICY_KINDS = ('sac', 'cem')
# The start of the world-model loss check's message: the programs report an
# InvalidArgumentError carrying it without a traceback (a setting to lower).
NON_FINITE_LOSS = 'world-model loss is NaN or inf'


def check_sac_settings(initial_alpha, acting_window, td_steps=1, target_pessimism=0.0,
                       critic_priority_exponent=0.0):
  """Named errors for the temperature, acting-window and TD-target settings."""
  if initial_alpha is not None and not (
      setting_values.is_number(initial_alpha) and initial_alpha > 0):
    raise errors.ConfigError(
        f'LatentSacAgent.initial_alpha={initial_alpha!r}: must be a number > 0 (the '
        'temperature SAC starts at, e.g. 0.1) or None (exp(initial_log_alpha)).')
  if acting_window is not None and (
      not setting_values.is_whole(acting_window) or acting_window < 2):
    raise errors.ConfigError(
        f'LatentSacAgent.acting_window={acting_window!r}: must be a whole number >= 2 '
        '(steps the acting filter re-filters from zeros, e.g. Experiment.sequence_length '
        '- 1) or None (a filter over the whole episode).')
  if not (setting_values.is_whole(td_steps) and td_steps >= 1):
    raise errors.ConfigError(
        f'LatentSacAgent.td_steps={td_steps!r}: must be a whole number >= 1 (rewards the '
        "critic's target sums before it bootstraps; 1: the one-step target).")
  for name, value, meaning in (
      ('target_pessimism', target_pessimism,
       "the multiple of the target critics' disagreement |Q1 - Q2| taken off SAC's min(Q1, Q2) "
       "target; 0: SAC's own target"),
      ('critic_priority_exponent', critic_priority_exponent,
       "the power of each pair's TD error that weighs it in the critic's loss, prioritized "
       "replay's alpha, e.g. 0.6; 0: SAC's uniform loss")):
    if not (setting_values.is_finite_number(value) and value >= 0):
      raise errors.ConfigError(
          f'LatentSacAgent.{name}={value!r}: must be a finite number >= 0 ({meaning}).')


def _legacy_adam(learning_rate, epsilon=1e-7):
  # SacAgent converts new Keras optimizers to legacy ones in TF 2.15; use
  # legacy everywhere so every optimizer checkpoints the same way.
  return tf.keras.optimizers.legacy.Adam(learning_rate=learning_rate, epsilon=epsilon)


@gin.configurable
class LatentSacAgent(tf_agent.TFAgent):
  """World model + SAC on its latent features.

  Args:
    time_step_spec, action_spec: the environment's specs (dict observations).
    world_model: a `WorldModel` (None: built from gin defaults).
    actor_fc_layers, critic_fc_layers: SAC network sizes.
    model_learning_rate, actor_learning_rate, critic_learning_rate,
      alpha_learning_rate: the four separate Adam optimizers.
    model_gradient_clipping: global-norm clip of the world-model gradient.
    sac_gradient_clipping: per-variable norm clip in SacAgent (None: off).
    target_entropy: None means -dim(A) (SLAC); TF-Agents' own default is -dim(A)/2.
    gamma, target_update_tau, target_update_period, reward_scale_factor,
      initial_log_alpha: SAC hyper-parameters.
    initial_alpha: the temperature SAC starts at (None: exp(initial_log_alpha),
      i.e. 1.0 as in SLAC; SAC-AE, CURL and DrQ start at 0.1).
    acting_window: how every acting policy builds its belief: None filters
      the whole episode; K filters the last K steps from the zero state at
      every step (SLAC), the same construction as the training windows'
      beliefs. K <= Experiment.sequence_length - 1 keeps the acting belief's
      history within what SAC trained on.
    sac_burn_in: skipped leading pairs of mid-episode windows (see module doc).
    td_steps: n of the critic's n-step target: the discounted sum of the next
      n rewards of the window, then gamma^n times the value at feat_{t+n}
      (1: the one-step target of SAC and SLAC). Cut short at the episode's
      end and at the window's end, where it bootstraps from the last step it
      reached. Carries a cost (a fall) back n steps per update instead of one.
    target_pessimism: beta >= 0: the critic bootstraps from min(Q1', Q2') -
      beta * |Q1' - Q2'| (0: SAC's min; `PessimisticSacAgent`), lower where
      the twin critics disagree, i.e. on rarely seen states.
    critic_priority_exponent: a >= 0: the critic's loss weighs each pair by
      its TD error to the power a (prioritized replay's gradient without
      importance weights; `PessimisticSacAgent`); 0: SAC's uniform loss.
    train_world_model, train_sac: turn either update off (a frozen world model;
      a world-model-only run).
    greedy_filter: how the greedy policy (evaluation and the exported
      greedy_policy) filters observations: 'mean' uses the posterior mean
      (deterministic), 'sample' a posterior sample, which is what SAC's
      training features are. The collect policy always samples.
    collect_with, eval_with: what acts in training episodes (`collect_policy`)
      and in evaluation (`policy`): 'sac' (the latent actor) or 'cem' (PlaNet's
      planner, `CemPlanningPolicy`, on the same world model). Training is the
      same either way: the world model and SAC learn from the same replay.

  The planner's gin settings (`CemPlanningPolicy.*`) are read once, here, and
  every planner `make_policy` builds later uses them: an agent rebuilt from a
  run's config (export, bench) plans as the run did after gin is cleared.
  """

  GREEDY_FILTERS = ('mean', 'sample')

  def __init__(self, time_step_spec, action_spec, world_model=None,
               actor_fc_layers=(256, 256), critic_fc_layers=(256, 256),
               model_learning_rate=6e-4, actor_learning_rate=3e-4,
               critic_learning_rate=3e-4, alpha_learning_rate=3e-4,
               model_gradient_clipping=100.0, sac_gradient_clipping=None,
               target_entropy=None, gamma=0.99, target_update_tau=0.005,
               target_update_period=1, reward_scale_factor=1.0, initial_log_alpha=0.0,
               initial_alpha=None, acting_window=None, sac_burn_in=3, td_steps=1,
               target_pessimism=0.0, critic_priority_exponent=0.0, train_world_model=True,
               train_sac=True, greedy_filter='mean', collect_with='sac', eval_with='sac',
               train_step_counter=None, name='LatentSacAgent'):
    tf.Module.__init__(self, name=name)
    if greedy_filter not in self.GREEDY_FILTERS:
      raise ValueError(f'LatentSacAgent.greedy_filter={greedy_filter!r}: use one of '
                       f'{self.GREEDY_FILTERS} (posterior mean or sample in the greedy policy).')
    self._greedy_filter = greedy_filter
    for binding, kind in (('collect_with', collect_with), ('eval_with', eval_with)):
      if kind not in POLICY_KINDS:
        raise errors.ConfigError(
            f'LatentSacAgent.{binding}={kind!r}: choose one of {POLICY_KINDS}.')
    if train_step_counter is None:
      train_step_counter = tf.Variable(0, dtype=tf.int64, name='train_step')
    if world_model is None:
      world_model = world_model_lib.WorldModel(time_step_spec.observation, action_spec)
    self._world_model = world_model
    check_sac_settings(initial_alpha, acting_window, td_steps, target_pessimism,
                       critic_priority_exponent)
    if initial_alpha is not None:
      initial_log_alpha = math.log(initial_alpha)
    self._filter_network = rssm_network.RssmEncodingNetwork(
        world_model.encoder, world_model.rssm, action_spec, window=acting_window)
    feature_spec = self._filter_network.feature_spec
    feature_time_step_spec = ts.time_step_spec(feature_spec, time_step_spec.reward)

    actor_net = actor_distribution_network.ActorDistributionNetwork(
        feature_spec, action_spec, fc_layer_params=actor_fc_layers,
        continuous_projection_net=(
            tanh_normal_projection_network.TanhNormalProjectionNetwork))
    critic_net = critic_network.CriticNetwork(
        (feature_spec, action_spec), joint_fc_layer_params=critic_fc_layers,
        kernel_initializer='glorot_uniform', last_kernel_initializer='glorot_uniform')
    if target_entropy is None:
      target_entropy = -float(action_spec.shape.num_elements())
    # Both critic settings at 0 keep TF-Agents' own SacAgent; both classes hold
    # the same variables.
    sac_class, critic_settings = sac_agent.SacAgent, {}
    if target_pessimism or critic_priority_exponent:
      sac_class = pessimistic_sac.PessimisticSacAgent
      critic_settings = {'target_pessimism': target_pessimism,
                         'critic_priority_exponent': critic_priority_exponent}
    self._sac = sac_class(
        feature_time_step_spec, action_spec,
        critic_network=critic_net, actor_network=actor_net,
        actor_optimizer=_legacy_adam(actor_learning_rate),
        critic_optimizer=_legacy_adam(critic_learning_rate),
        alpha_optimizer=_legacy_adam(alpha_learning_rate),
        target_update_tau=target_update_tau, target_update_period=target_update_period,
        gamma=gamma, reward_scale_factor=reward_scale_factor,
        initial_log_alpha=initial_log_alpha, target_entropy=target_entropy,
        gradient_clipping=sac_gradient_clipping,
        train_step_counter=train_step_counter, **critic_settings)
    self._sac.initialize()
    self._actor_network = actor_net
    self._model_optimizer = _legacy_adam(model_learning_rate, epsilon=1e-4)
    self._model_gradient_clipping = model_gradient_clipping
    self._sac_burn_in = sac_burn_in
    self._td_steps = td_steps
    self._train_world_model = train_world_model
    self._train_sac = train_sac
    self._gamma = gamma
    self._reward_scale_factor = reward_scale_factor
    self._collect_with = collect_with
    self._eval_with = eval_with
    # Read-only and untracked (a dict attribute would join the checkpoint graph).
    self._planner_settings = types.MappingProxyType(cem_policy.planner_settings())

    policy = self.make_policy(eval_with, True, time_step_spec, action_spec)
    collect_policy = self.make_policy(collect_with, False, time_step_spec, action_spec)
    super().__init__(time_step_spec, action_spec, policy, collect_policy,
                     train_sequence_length=None, train_step_counter=train_step_counter)

  @property
  def world_model(self):
    return self._world_model

  @property
  def sac(self):
    return self._sac

  @property
  def filter_network(self):
    """The RSSM filter every acting policy steps (`RssmEncodingNetwork`)."""
    return self._filter_network

  @property
  def actor_network(self):
    return self._actor_network

  @property
  def log_alpha(self):
    return self._sac._log_alpha  # pylint: disable=protected-access

  def set_train_world_model(self, enabled):
    """Freeze (False) or unfreeze the world model; takes effect at the next trace."""
    self._train_world_model = enabled

  def world_model_variables(self):
    return self._world_model.trainable_variables

  def sac_variables(self):
    return (self._actor_network.trainable_variables
            + self._sac._critic_network_1.trainable_variables  # pylint: disable=protected-access
            + self._sac._critic_network_2.trainable_variables  # pylint: disable=protected-access
            + [self.log_alpha])

  @property
  def greedy_filter(self):
    return self._greedy_filter

  @property
  def planner_settings(self):
    """The `CemPlanningPolicy` settings every planner of this agent gets (read-only)."""
    return self._planner_settings

  def make_policy(self, kind, greedy, time_step_spec=None, action_spec=None,
                  greedy_filter=None, **planner_kwargs):
    """A new 'sac' or 'cem' policy on this agent's networks (no new variables).

    A greedy policy filters as `greedy_filter` says ('mean' | 'sample'; None:
    the agent's setting); a collect policy samples. A planner has the
    settings gin bound when the agent was built (`planner_settings`), not the
    ones it binds now; `planner_kwargs` override them.
    """
    time_step_spec = time_step_spec or self.time_step_spec
    action_spec = action_spec or self.action_spec
    greedy_filter = greedy_filter or self._greedy_filter
    if greedy_filter not in self.GREEDY_FILTERS:
      raise ValueError(f'greedy_filter={greedy_filter!r}: use one of {self.GREEDY_FILTERS}')
    sample_posterior = greedy_filter == 'sample' if greedy else True
    if kind == 'sac':
      if planner_kwargs:
        raise ValueError(f'planner arguments {sorted(planner_kwargs)} given for the actor policy')
      return latent_policy.LatentActorPolicy(
          time_step_spec, action_spec, self._filter_network, self._actor_network,
          greedy=greedy, sample_posterior=sample_posterior)
    if kind == 'cem':
      # pylint: disable=protected-access
      critics = {'critic': (self._sac._critic_network_1, self._sac._critic_network_2),
                 'target_critic': (self._sac._target_critic_network_1,
                                   self._sac._target_critic_network_2)}
      settings = dict(self._planner_settings, **planner_kwargs)
      # continuation_head=None in planner_kwargs: a planner blind to episode ends.
      settings.setdefault('continuation_head', self._world_model.continuation_decoder)
      return cem_policy.CemPlanningPolicy(
          time_step_spec, action_spec, self._filter_network,
          self._world_model.reward_decoder, actor_network=self._actor_network,
          critics=critics, critic_gamma=self._gamma,
          critic_reward_scale=self._reward_scale_factor, greedy=greedy,
          sample_posterior=sample_posterior, **settings)
    raise errors.ConfigError(f'unknown policy kind {kind!r}: choose one of {POLICY_KINDS}.')

  def greedy_policy(self, greedy_filter=None, sensors_only=False):
    """The greedy policy (what `eval_with` names) with `greedy_filter`
    ('mean' | 'sample'; None: the agent's setting), on the env's observation
    spec or, with `sensors_only`, on the filter's inputs alone (for export)."""
    spec = self.time_step_spec
    if sensors_only:
      spec = ts.time_step_spec(self._world_model.policy_observation_spec,
                               self.time_step_spec.reward)
    return self.make_policy(self._eval_with, True, spec, greedy_filter=greedy_filter)

  def export_policy(self, greedy=True, kind=None):
    """A policy whose observation spec holds the filter's inputs only; `kind`
    None: what acts in this role (`eval_with` when greedy, else `collect_with`).
    The greedy one filters as `greedy_filter` says."""
    if kind is None:
      kind = self._eval_with if greedy else self._collect_with
    spec = ts.time_step_spec(self._world_model.policy_observation_spec,
                             self.time_step_spec.reward)
    return self.make_policy(kind, greedy, spec)

  def _initialize(self):
    return tf.no_op()

  def sac_transitions(self, experience, features):
    """Consecutive pairs of each window as a flat [B * T] Transition + weights."""
    mask = world_model_lib.valid_mask(experience.step_type)
    num_pairs = experience.step_type.shape[1] - 1
    if num_pairs is not None and self._sac_burn_in >= num_pairs:
      # Only windows starting at FIRST would feed SAC: refuse rather than
      # silently learn from episode starts alone.
      raise ValueError(
          f'LatentSacAgent.sac_burn_in={self._sac_burn_in} >= the {num_pairs} pairs of a '
          f'{num_pairs + 1}-step window (Experiment.sequence_length): use sac_burn_in '
          f'<= {num_pairs - 1} or longer windows.')
    if num_pairs is not None and self._td_steps > num_pairs:
      raise ValueError(
          f'LatentSacAgent.td_steps={self._td_steps} > the {num_pairs} pairs of a '
          f'{num_pairs + 1}-step window (Experiment.sequence_length): use td_steps '
          f'<= {num_pairs} or longer windows.')
    pair = lambda x: x[:, :-1]
    nxt = lambda x: x[:, 1:]
    time_steps = ts.TimeStep(
        step_type=pair(experience.step_type),
        reward=tf.zeros_like(pair(experience.reward)),
        discount=tf.ones_like(pair(experience.discount)),
        observation=pair(features))
    next_time_steps = self._td_targets(
        ts.TimeStep(step_type=nxt(experience.step_type), reward=pair(experience.reward),
                    discount=pair(experience.discount), observation=nxt(features)),
        nxt(mask))
    starts_at_first = tf.equal(experience.step_type[:, :1], ts.StepType.FIRST)
    after_burn_in = tf.range(num_pairs) >= self._sac_burn_in
    usable = tf.logical_or(starts_at_first, after_burn_in[None, :])
    weights = nxt(mask) * tf.cast(usable, tf.float32)
    action_step = policy_step.PolicyStep(pair(experience.action), (), ())
    transition = trajectory.Transition(time_steps, action_step, next_time_steps)
    flatten = lambda x: tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))
    transition = tf.nest.map_structure(flatten, transition)
    weights = flatten(weights)
    # Normalise so the SAC losses are means over the usable pairs.
    weights = weights / tf.maximum(tf.reduce_mean(weights), 1e-6)
    return transition, weights

  def _td_targets(self, arrivals, arrived):
    """The step each pair's critic target bootstraps from, and the reward and
    discount before it, for `td_steps` n: with arrival t+1+k of pair t (k < n)
    inside the episode and the window (`arrived`), the target is

      sum_k gamma^k (prod_{j<k} d_{t+j}) r_{t+k} + gamma^m (prod_{j<m} d_{t+j}) V(feat_{t+m}),

    m the arrivals reached. SacAgent computes r + gamma * discount * V, so the
    discount returned is gamma^(m-1) prod d. n = 1 returns `arrivals` itself.
    """
    def ahead(x, k):  # x[:, t + k] at t; zeros past the window's end
      padding = [[0, 0], [0, k]] + [[0, 0]] * (x.shape.rank - 2)
      return tf.pad(x[:, k:], padding)
    def where(reached, new, old):  # per pair, broadcast over trailing dims
      reached = tf.reshape(reached, tf.concat(
          [tf.shape(reached), tf.ones([new.shape.rank - 2], tf.int32)], 0))
      return tf.where(reached, new, old)
    bootstrap, reward = arrivals, arrivals.reward
    # The weight of reward r_{t+k}: gamma^k prod_{j<k} d_{t+j}, 0 once the episode ended.
    scale = self._gamma * arrivals.discount
    for k in range(1, self._td_steps):
      reached = ahead(arrived, k) > 0
      later = tf.nest.map_structure(lambda x, k=k: ahead(x, k), arrivals)
      reward += tf.where(reached, scale * later.reward, 0.0)
      later = later._replace(discount=scale * later.discount)
      bootstrap = tf.nest.map_structure(lambda new, old, r=reached: where(r, new, old),
                                        later, bootstrap)
      scale = tf.where(reached, self._gamma * later.discount, 0.0)
    return bootstrap._replace(reward=reward)

  def _encode_without_gradients(self, experience):
    posterior, _ = self._world_model.observe(
        experience.observation, experience.action, experience.step_type)
    return tf.stop_gradient(rssm_lib.features(posterior))

  def _model_update(self, experience):
    """One world-model optimizer step; returns (loss, terms, posterior)."""
    with tf.GradientTape() as tape:
      model_loss, terms, posterior = self._world_model.loss(experience)
    checked_loss = tf.debugging.check_numerics(
        model_loss, f'{NON_FINITE_LOSS} (lower '
        'LatentSacAgent.model_learning_rate or model_gradient_clipping); '
        'the update was not applied')
    if self._train_world_model:
      variables = self._world_model.trainable_variables
      with tf.control_dependencies([checked_loss]):
        grads = tape.gradient(model_loss, variables)
      grads, grad_norm = tf.clip_by_global_norm(grads, self._model_gradient_clipping)
      self._model_optimizer.apply_gradients(zip(grads, variables))
      terms['model_grad_norm'] = grad_norm
    return checked_loss, terms, posterior

  def _sac_update(self, experience, features):
    transition, sac_weights = self.sac_transitions(experience, features)
    sac_info = self._sac.train(transition, weights=sac_weights)
    extra = dict(critic_loss=sac_info.extra.critic_loss,
                 actor_loss=sac_info.extra.actor_loss,
                 alpha_loss=sac_info.extra.alpha_loss,
                 alpha=tf.exp(self.log_alpha))
    return sac_info.loss, extra

  def pretrain_world_model(self, experience):
    """A world-model update alone (pre-training on the warm-up data before SAC
    starts); the train step counter does not move. Returns the loss terms."""
    _, terms, _ = self._model_update(experience)
    return terms

  def train_sac_only(self, sac_experience):
    """An extra SAC update on its own freshly sampled windows, encoded by the
    world model without gradients; the train step counter (which counts
    world-model updates) does not move. Returns SAC's loss terms."""
    features = self._encode_without_gradients(sac_experience)
    loss, extra = self._sac_update(sac_experience, features)
    with tf.control_dependencies([loss]):
      # SacAgent advanced the shared counter; a train step is a model update.
      self.train_step_counter.assign_sub(1)
    return extra

  def _train(self, experience, weights=None, sac_experience=None):
    """One train step; `sac_experience` (optional) is a separate [B', T+1]
    batch of windows for SAC, encoded by the world model without gradients
    (SLAC's layout). Without it SAC uses the features of `experience`."""
    del weights  # Windows are sampled uniformly; no importance weights.
    model_loss, terms, posterior = self._model_update(experience)
    if sac_experience is None:
      with tf.control_dependencies([model_loss]):
        features = tf.stop_gradient(rssm_lib.features(posterior))
    else:
      # Encoded after the model update, like SLAC's separate SAC batch.
      features = self._encode_without_gradients(sac_experience)
      experience = sac_experience
    extra = dict(terms)
    if self._train_sac:
      sac_loss, sac_extra = self._sac_update(experience, features)
      extra.update(sac_extra)
      total = model_loss + sac_loss
    else:
      # SacAgent advances the shared counter; without it we must.
      self.train_step_counter.assign_add(1)
      total = model_loss
    return tf_agent.LossInfo(loss=total, extra=extra)
