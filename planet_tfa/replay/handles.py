"""The learner's one interface to its replay, local or remote, chosen once at setup.

Both handles have `address`, `client`, `attach(agent, train_step)`,
`publish()`, `wait_for_data(deadline_s)`, `table_size()`, `checkpoint()` and
`stop()`. A `LocalReplay` owns an in-process server and its checkpoints; a
`RemoteReplay` talks to a standalone server (`python -m
planet_tfa.programs.serve`), which owns its checkpoints and lifetime, and
publishes the collect policy's variables for the collectors.
"""
import time

import tensorflow as tf

from planet_tfa.replay import tables
from planet_tfa.replay import variables


class LocalReplay(tables.ReplayServer):
  """An in-process server holding the experience table; persists to ROOT/replay/."""

  is_remote = False

  def __init__(self, data_spec, root_dir):
    super().__init__([tables.make_experience_table(data_spec)], root_dir=root_dir)
    tables.check_sampler(self.client.server_info())

  def attach(self, agent, train_step):
    del agent, train_step  # the table was built from this agent's spec

  def publish(self):
    pass  # no collector outside this process

  def wait_for_data(self, deadline_s=None):
    del deadline_s
    return self.table_size()


class RemoteReplay:
  """The learner's handle on a standalone server.

  Connects at construction (retrying until `deadline_s`, then raising
  `tables.ReplayUnavailableError` naming the address), so a wrong address
  fails before any environment starts.
  """

  is_remote = True

  def __init__(self, address, deadline_s=60.0):
    self.address = address
    self.client = tables.wait_for_server(address, deadline_s=deadline_s)
    self._variables = None

  def attach(self, agent, train_step):
    """Checks both tables fit `agent`; enables `publish()` of its collect policy."""
    server_info = self.client.server_info()
    variables.check_table(server_info, tables.EXPERIENCE_TABLE,
                          tables.experience_signature(agent.collect_data_spec),
                          self.address)
    tables.check_sampler(server_info, self.address)
    self._variables = variables.PolicyVariables(
        self.address, agent.collect_policy, train_step, client=self.client)

  def publish(self):
    """Pushes the policy variables + train step to the `variables` table."""
    try:
      self._variables.publish()
    except tf.errors.OpError as error:
      raise tables.ReplayUnavailableError(
          f'lost the Reverb server at {self.address} while publishing the policy '
          f'({type(error).__name__}: {error.message.strip().splitlines()[0][:200]}). '
          'This learner checkpoints on the way out; restart it once the server is '
          'back and it resumes.') from None

  def wait_for_data(self, deadline_s=600.0, log_every_s=30.0):
    """Blocks until the table allows sampling (its rate limiter's min size).

    Raises `tables.ReplayEmptyError` naming the address after `deadline_s`
    (None: wait forever).
    """
    start = last_log = time.time()
    while True:
      info = self.client.server_info()[tables.EXPERIENCE_TABLE]
      needed = max(1, info.rate_limiter_info.min_size_to_sample)
      if info.current_size >= needed:
        return info.current_size
      waited = time.time() - start
      if deadline_s is not None and waited > deadline_s:
        raise tables.ReplayEmptyError(
            f"replay table '{tables.EXPERIENCE_TABLE}' at {self.address} still holds "
            f'{info.current_size} of the {needed} windows needed to sample after '
            f'{waited:.0f}s: no collector is writing to it. Start collectors with '
            f'`python -m planet_tfa.programs.collect --replay_server={self.address} '
            '--collector_id=K ...` or raise train_eval.remote_wait_for_data_s.')
      if time.time() - last_log >= log_every_s or waited == 0:
        print(f'Waiting for collectors: {self.address} holds {info.current_size}/'
              f'{needed} windows ...', flush=True)
        last_log = time.time()
      time.sleep(1.0)

  def counts_collected_steps(self):
    """Whether the server has the collectors' step queue (servers before it did not)."""
    return tables.COLLECTED_STEPS_TABLE in self.client.server_info()

  def drain_collected_steps(self, wait_s=0.0, deadline_s=600.0, log_every_s=30.0):
    """(episodes, env steps) the collectors reported since the last drain.

    With `wait_s` > 0, waits (polling, up to `deadline_s`; None: forever) until
    at least one episode is reported; raises `tables.ReplayEmptyError` after
    the deadline, naming the address and what to start.
    """
    start = last_log = time.time()
    while True:
      pending = self.client.server_info()[tables.COLLECTED_STEPS_TABLE].current_size
      if pending or not wait_s:
        break
      waited = time.time() - start
      if deadline_s is not None and waited > deadline_s:
        raise tables.ReplayEmptyError(
            f'no collector reported an episode to {self.address} for {waited:.0f}s, and '
            'this learner trains per environment step '
            '(train_eval.train_steps_per_env_step). Start collectors with `python -m '
            f'planet_tfa.programs.collect --replay_server={self.address} --collector_id=K '
            '...` or raise train_eval.remote_wait_for_data_s.')
      if time.time() - last_log >= log_every_s:
        print(f'Waiting for collectors: no episode reported to {self.address} for '
              f'{waited:.0f}s ...', flush=True)
        last_log = time.time()
      time.sleep(min(wait_s, 1.0))
    if not pending:
      return 0, 0
    # A queue hands each item to one sampler once: items counted here are gone.
    samples = self.client.sample(tables.COLLECTED_STEPS_TABLE, num_samples=pending,
                                 emit_timesteps=False)
    steps = sum(int(sample.data[0]) for sample in samples)
    return pending, steps

  def table_size(self, table=tables.EXPERIENCE_TABLE):
    try:
      return self.client.server_info(timeout=10)[table].current_size
    except Exception:  # pylint: disable=broad-except
      return None  # the server is gone; callers only report this number

  def checkpoint(self):
    return None  # the server checkpoints itself

  def stop(self):
    pass  # the server outlives this learner
