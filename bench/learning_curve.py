"""Learning evidence: eval return over wall time on a task, against a random policy.

  python -m bench.learning_curve --root_dir=runs/bench_cartpole --budget_s=3600 \
      --gin_file=cartpole_fast.gin [--gin_param=...]

Runs train_eval.py with a wall-time budget, then prints one JSON line with the
random policy's average return, the eval returns over time, and writes
ROOT/learning_curve.png.
"""
import json
import os
import subprocess
import sys

from absl import app
from absl import flags

from bench import compare_curves
from bench.eval_filter import random_policy_return
from planet_tfa import setting_values

flags.DEFINE_string('root_dir', 'runs/bench_cartpole', 'Run root.')
flags.DEFINE_float('budget_s', 3600, 'Wall-clock budget of the training run.')
flags.DEFINE_multi_string('gin_file', ['cartpole_fast.gin'], 'Gin files.')
flags.DEFINE_multi_string('gin_param', [], 'Gin bindings.')
flags.DEFINE_integer('random_episodes', 10, 'Episodes for the random baseline.')
flags.DEFINE_string('label', 'latent SAC', 'Curve label.')
FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
  """Parses `argv` (without the program name) into FLAGS, running nothing
  (bench.registry --check)."""
  return FLAGS(['bench.learning_curve'] + list(argv))


def main(argv):
  del argv
  root = os.path.abspath(FLAGS.root_dir)
  cmd = [sys.executable, os.path.join(REPO, 'train_eval.py'), f'--root_dir={root}']
  cmd += [f'--gin_file={f}' for f in FLAGS.gin_file]
  cmd += [f'--gin_param={p}' for p in FLAGS.gin_param]
  cmd += [f'--gin_param=train_eval.time_budget_s={FLAGS.budget_s}',
          '--gin_param=train_eval.num_iterations=100000']
  print(' '.join(map(setting_values.shell_word, cmd)), file=sys.stderr, flush=True)
  subprocess.run(cmd, check=True, cwd=REPO)
  records = compare_curves.load(root)
  random_mean, random_std = random_policy_return(FLAGS.gin_file, FLAGS.gin_param,
                                                 FLAGS.random_episodes)
  compare_curves.plot({FLAGS.label: records}, os.path.join(root, 'learning_curve.png'),
                      random_mean)
  returns = [r['eval_return'] for r in records]
  print(json.dumps({
      'name': 'learning_curve', 'gin_files': FLAGS.gin_file, 'gin_params': FLAGS.gin_param,
      'budget_s': FLAGS.budget_s, 'random_return_mean': round(random_mean, 2),
      'random_return_std': round(random_std, 2),
      'final_eval_return': returns[-1] if returns else None,
      'best_eval_return': max(returns) if returns else None,
      'env_steps': int(records[-1]['env_steps']) if records else 0,
      'train_steps': int(records[-1]['train_step']) if records else 0,
      'curve': [(r['wall_time_s'], r['eval_return']) for r in records],
      'png': os.path.join(root, 'learning_curve.png')}))


if __name__ == '__main__':
  app.run(main)
