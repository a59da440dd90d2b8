"""Per-frame observation encoders: conv for images, MLP for vectors, fused for dicts.

Every encoder maps one observation nest with outer dims `[...]` (batch, or
batch and time) to an embedding `[..., embed_size]`. Images arrive as uint8
and are rescaled to [-0.5, 0.5] here, the same range the image decoder targets.
"""
import contextlib

import gin
import numpy as np
import tensorflow as tf

from planet_tfa import errors


def image_to_float(image):
  """uint8 [0, 255] -> float32 [-0.5, 0.5] (floats pass through)."""
  if image.dtype == tf.uint8:
    return tf.cast(image, tf.float32) / 255.0 - 0.5
  return tf.cast(image, tf.float32)


def _merge_outer(x, inner_rank):
  """Folds all outer dims into one batch dim; returns the fold and the outer shape."""
  outer_shape = tf.shape(x)[:tf.rank(x) - inner_rank]
  inner_shape = tf.shape(x)[tf.rank(x) - inner_rank:]
  return tf.reshape(x, tf.concat([[-1], inner_shape], 0)), outer_shape


def _split_outer(x, outer_shape):
  return tf.reshape(x, tf.concat([outer_shape, tf.shape(x)[1:]], 0))


PRECISIONS = ('float32', 'mixed_bfloat16')


def check_precision(precision):
  """The conv layers' Keras dtype policy: fp32, or bf16 compute on fp32 variables."""
  if precision not in PRECISIONS:
    raise errors.ConfigError(
        f"image precision '{precision}' is not one of {PRECISIONS} or 'auto' (fix "
        'WorldModel.image_precision in gin); mixed_float16 would need loss scaling, '
        'which the world model does not do.')
  return precision


@contextlib.contextmanager
def computing_in_float32(module):
  """Within it, every bf16-computing Keras layer under `module` computes in fp32;
  yields how many were switched. Their variables are fp32 either way, so this
  only changes what a trace made inside it computes with: a float32 graph of a
  mixed-precision model, for targets without bf16 (TFLite)."""
  layers = [layer for layer in module.submodules if isinstance(layer, tf.keras.layers.Layer)
            and layer.dtype_policy.compute_dtype == 'bfloat16']
  policies = [layer.dtype_policy for layer in layers]
  try:
    for layer in layers:
      layer._set_dtype_policy('float32')  # pylint: disable=protected-access
    yield len(layers)
  finally:
    for layer, policy in zip(layers, policies):
      layer._set_dtype_policy(policy)  # pylint: disable=protected-access


@gin.configurable
class ConvEncoder(tf.keras.layers.Layer):
  """PlaNet's 64x64 image encoder: four stride-2 4x4 convs, depth d..8d.

  `precision='mixed_bfloat16'` runs the convs in bf16 (variables stay fp32,
  so checkpoints do not change); the embedding is returned as fp32.
  """

  def __init__(self, depth=32, activation='relu', precision='float32', name='conv_encoder'):
    super().__init__(name=name)
    self.depth = depth
    self.precision = check_precision(precision)
    self._convs = [
        tf.keras.layers.Conv2D(mult * depth, 4, strides=2, activation=activation,
                               dtype=precision)
        for mult in (1, 2, 4, 8)
    ]

  def call(self, image):
    frames, outer_shape = _merge_outer(image_to_float(image), 3)
    for conv in self._convs:
      frames = conv(frames)
    embed = tf.reshape(frames, [tf.shape(frames)[0], int(np.prod(frames.shape[1:]))])
    return _split_outer(tf.cast(embed, tf.float32), outer_shape)


@gin.configurable
class MlpEncoder(tf.keras.layers.Layer):
  """Vector observations (ego state, proprioception) -> embedding."""

  def __init__(self, units=(256, 256), activation='elu', name='mlp_encoder'):
    super().__init__(name=name)
    self._layers = [tf.keras.layers.Dense(u, activation=activation) for u in units]

  def call(self, vector):
    x = tf.cast(vector, tf.float32)
    for layer in self._layers:
      x = layer(x)
    return x


class ObservationSpecError(errors.UserError, ValueError):
  """An observation does not match the spec the model was built for."""


def check_observation(observation, spec, outer_rank=None):
  """Raises ObservationSpecError naming the key, the expected spec and what came.

  Only static information is checked, so this costs nothing at run time.
  """
  for key, key_spec in spec.items():
    if not isinstance(observation, dict) or key not in observation:
      given = sorted(observation) if isinstance(observation, dict) else type(observation).__name__
      raise ObservationSpecError(
          f"observation key '{key}' is missing: expected {key_spec}, "
          f'got keys {given}. Check the encoder/decoder keys in the gin config.')
    value = observation[key]
    dtype = tf.as_dtype(value.dtype)
    if dtype != key_spec.dtype:
      raise ObservationSpecError(
          f"observation '{key}' has dtype {dtype.name}, expected {key_spec.dtype.name} "
          f'(spec {key_spec}, given shape {value.shape}).')
    inner = tuple(key_spec.shape)
    shape = tuple(value.shape)
    given_inner = shape[len(shape) - len(inner):] if len(shape) >= len(inner) else shape
    if len(shape) < len(inner) or any(
        g is not None and g != e for g, e in zip(given_inner, inner)):
      raise ObservationSpecError(
          f"observation '{key}' has shape {shape}, expected [..., {', '.join(map(str, inner))}] "
          f'(spec {key_spec}).')
    if outer_rank is not None and len(shape) - len(inner) != outer_rank:
      raise ObservationSpecError(
          f"observation '{key}' has shape {shape}: expected {outer_rank} outer dims "
          f'before {list(inner)}.')


def is_image_spec(spec):
  return len(spec.shape) == 3


def check_vector_scales(vector_scales, observation_spec):
  """{key: float32 array [N]} of `vector_scales` ({key: N positive numbers}); {} for None."""
  checked = {}
  for key, scales in (vector_scales or {}).items():
    spec = observation_spec.get(key)
    if spec is None or len(spec.shape) != 1:
      raise errors.ConfigError(
          f"WorldModel.vector_scales names '{key}', which is not a vector observation of this "
          f'task (vector keys: {sorted(k for k, v in observation_spec.items() if len(v.shape) == 1)}).')
    scales = np.asarray(scales, np.float32).reshape(-1)
    if scales.shape != tuple(spec.shape) or not np.all(np.isfinite(scales) & (scales > 0)):
      raise errors.ConfigError(
          f"WorldModel.vector_scales['{key}'] = {scales.tolist()}: needs {spec.shape[0]} "
          'finite numbers > 0, one per element (the typical size of each, in its units).')
    checked[key] = scales
  return checked


def scale_vector(vector, scales):
  """A vector observation in units of its scales (None: as it is), float32."""
  vector = tf.cast(vector, tf.float32)
  return vector if scales is None else vector / tf.constant(scales)


@gin.configurable
class MultiModalEncoder(tf.keras.layers.Layer):
  """One encoder per observation key, embeddings concatenated in key order.

  `keys` chooses which observation entries are encoder inputs; the rest of the
  observation (e.g. a bird's-eye mask used only as a reconstruction target) is
  ignored here, so a policy built on this encoder never needs it.
  """

  def __init__(self, observation_spec, keys=None, image_encoder=ConvEncoder,
               vector_encoder=MlpEncoder, vector_scales=None, name='encoder'):
    """`vector_scales`: {key: per-element scales} that vector observations are divided
    by before their encoder (check_vector_scales), so each enters at unit scale."""
    super().__init__(name=name)
    if not isinstance(observation_spec, dict):
      raise TypeError('MultiModalEncoder expects a dict observation spec; '
                      f'got {observation_spec}')
    keys = sorted(observation_spec) if keys is None else list(keys)
    unknown = [k for k in keys if k not in observation_spec]
    if unknown:
      raise ObservationSpecError(
          f'encoder keys {unknown} are not in the observation spec (keys: '
          f'{sorted(observation_spec)}); fix the gin binding of the encoder keys.')
    self.keys = keys
    self.input_spec_dict = {k: observation_spec[k] for k in keys}
    self.vector_scales = check_vector_scales(vector_scales, observation_spec)
    self._encoders = {}
    for key in keys:
      spec = observation_spec[key]
      if is_image_spec(spec):
        self._encoders[key] = image_encoder(name=f'{key}_encoder')
      elif len(spec.shape) == 1:
        self._encoders[key] = vector_encoder(name=f'{key}_encoder')
      else:
        raise ObservationSpecError(
            f"observation '{key}' has shape {spec.shape}: only images [H, W, C] "
            'and vectors [N] can be encoded.')

  def call(self, observation):
    check_observation(observation, self.input_spec_dict)
    embeds = [self._encoders[k](scale_vector(observation[k], self.vector_scales[k])
                                if k in self.vector_scales else observation[k])
              for k in self.keys]
    return embeds[0] if len(embeds) == 1 else tf.concat(embeds, -1)
