"""The acting policy: RSSM filter + SAC actor, as one stateful `TFPolicy`.

policy_state = {'deter', 'stoch', 'prev_action'}; it starts (and restarts at
every FIRST step) as deterministic zeros, which is where the world model's
training windows start too. Each step filters the new observation with the
previous action, then acts on the latent features and stores the action taken
as the next step's `prev_action`.

The greedy policy takes the actor's mode. Its filter uses the posterior mean
by default, which makes it a deterministic function of its inputs (and
exports as such); `sample_posterior=True` filters with posterior samples, as
SAC's training features are (`LatentSacAgent.greedy_filter`).
"""
import tensorflow as tf
import tensorflow_probability as tfp
from tf_agents.policies import tf_policy
from tf_agents.trajectories import policy_step


class LatentFilterPolicy(tf_policy.TFPolicy):
  """The RSSM filter step that every latent policy shares; subclasses choose the action.

  `time_step_spec` may hold more observation keys than the filter needs (the
  training environment's decode-only targets); only the filter's input keys
  are read, so the same networks also serve a policy whose spec has the
  sensor keys alone (the exported one). Subclasses store the action taken as
  the state's `prev_action`.
  """

  def __init__(self, time_step_spec, action_spec, rssm_network, greedy=False,
               sample_posterior=None, name=None):
    missing = [k for k in rssm_network.input_tensor_spec
               if k not in time_step_spec.observation]
    if missing:
      raise ValueError(f'policy observation spec lacks the filter inputs {missing}; '
                       f'has {sorted(time_step_spec.observation)}')
    # Attributes track the networks, so policy.variables() (and the variable
    # sync to remote collectors) includes the world model's filter.
    self._rssm_network = rssm_network
    self._greedy = greedy
    # Default: the collect policy samples, the greedy one takes the mean.
    self._sample_posterior = (not greedy) if sample_posterior is None else sample_posterior
    super().__init__(time_step_spec, action_spec,
                     policy_state_spec=rssm_network.state_spec,
                     info_spec=(), clip=True, name=name)

  @property
  def greedy(self):
    return self._greedy

  @property
  def sample_posterior(self):
    return self._sample_posterior

  def _filter(self, time_step, policy_state, seed=None):
    """(features, state) after this observation; `seed`: an optional stateless
    seed of the posterior sample (None: the global random state)."""
    observation = {k: time_step.observation[k] for k in self._rssm_network.input_tensor_spec}
    return self._rssm_network(observation, step_type=time_step.step_type,
                              network_state=policy_state,
                              sample=self._sample_posterior, seed=seed)


class LatentActorPolicy(LatentFilterPolicy):
  """Filters with an `RssmEncodingNetwork`, acts with an actor distribution network."""

  def __init__(self, time_step_spec, action_spec, rssm_network, actor_network,
               greedy=False, sample_posterior=None, name=None):
    self._actor_network = actor_network
    super().__init__(time_step_spec, action_spec, rssm_network, greedy=greedy,
                     sample_posterior=sample_posterior, name=name)

  def _variables(self):
    return self._rssm_network.variables + self._actor_network.variables

  def _distribution(self, time_step, policy_state):
    """The action distribution as plain TFP types (so a SavedModel loads without
    TF-Agents). Its state keeps the previous action: only action() knows the
    action taken, so use action() to step the policy."""
    features, state = self._filter(time_step, policy_state)
    squashed, _ = self._actor_network(
        features, step_type=time_step.step_type, network_state=())
    if self._greedy:
      distribution = tfp.distributions.Deterministic(loc=squashed.mode())
    else:
      normal = squashed.input_distribution
      distribution = tfp.distributions.TransformedDistribution(
          tfp.distributions.MultivariateNormalDiag(normal.mean(), normal.stddev()),
          tfp.bijectors.Chain([
              tfp.bijectors.Shift(squashed.action_means),
              tfp.bijectors.Scale(squashed.action_magnitudes),
              tfp.bijectors.Tanh()]))
    return policy_step.PolicyStep(distribution, state, ())

  def _action(self, time_step, policy_state, seed=None):
    features, state = self._filter(time_step, policy_state)
    action_distribution, _ = self._actor_network(
        features, step_type=time_step.step_type, network_state=())
    if self._greedy:
      action = action_distribution.mode()
    else:
      action = action_distribution.sample(seed=seed)
    state = dict(state, prev_action=tf.cast(action, tf.float32))
    return policy_step.PolicyStep(action, state, ())
