"""Decoders from latent features: images (transposed convs), vectors, reward.

Each decoder returns the mean of a unit-variance Normal, as in PlaNet; the
world model turns it into a log-likelihood.
"""
import gin
import tensorflow as tf

from planet_tfa.networks import conv_kernels
from planet_tfa.networks import encoders


@gin.configurable
class ImageDecoder(tf.keras.layers.Layer):
  """features [..., F] -> image mean [..., 64, 64, C] in [-0.5, 0.5] units.

  `fast_kernels` runs the 1x1-input layer as a matmul and the even-kernel
  layers as sub-pixel convs (`conv_kernels`): same variables, same results,
  faster on CPU. False gives Keras' plain Conv2DTranspose.
  `precision='mixed_bfloat16'` computes in bf16 on fp32 variables; the image
  mean is returned as fp32.
  """

  def __init__(self, channels=3, depth=32, activation='relu', fast_kernels=True,
               precision='float32', name='image_decoder'):
    super().__init__(name=name)
    self.channels = channels
    self.precision = encoders.check_precision(precision)
    self._project = tf.keras.layers.Dense(32 * depth, dtype=precision)
    plain = tf.keras.layers.Conv2DTranspose
    first = conv_kernels.MatmulConv2DTranspose if fast_kernels else plain
    even = conv_kernels.SubpixelConv2DTranspose if fast_kernels else plain
    # 1 -> 5 -> 13 -> 30 -> 64 with VALID padding (PlaNet's kernel sizes).
    self._deconvs = [
        first(4 * depth, 5, 2, activation=activation, dtype=precision),
        plain(2 * depth, 5, 2, activation=activation, dtype=precision),
        even(depth, 6, 2, activation=activation, dtype=precision),
        even(channels, 6, 2, dtype=precision),
    ]

  def call(self, features):
    x, outer_shape = encoders._merge_outer(features, 1)
    x = self._project(x)
    x = tf.reshape(x, [-1, 1, 1, x.shape[-1]])
    for deconv in self._deconvs:
      x = deconv(x)
    # The log-likelihood is summed over 12k pixels: compute it in fp32.
    return encoders._split_outer(tf.cast(x, tf.float32), outer_shape)


@gin.configurable
class VectorDecoder(tf.keras.layers.Layer):
  """features [..., F] -> vector mean [..., size] ([...] if `squeeze`)."""

  def __init__(self, size, units=(200, 200), activation='elu', squeeze=False,
               name='vector_decoder'):
    super().__init__(name=name)
    self.size = size
    self.squeeze = squeeze
    self._layers = [tf.keras.layers.Dense(u, activation=activation) for u in units]
    self._out = tf.keras.layers.Dense(size)

  def call(self, features):
    x = features
    for layer in self._layers:
      x = layer(x)
    x = self._out(x)
    return tf.squeeze(x, -1) if self.squeeze else x


@gin.configurable
def reward_decoder(units=(200, 200), activation='elu'):
  """PlaNet's reward head: a scalar per step."""
  return VectorDecoder(1, units=units, activation=activation, squeeze=True,
                       name='reward_decoder')


@gin.configurable
def continuation_decoder(units=(200, 200), activation='elu'):
  """The continuation head: per step, the logit of the episode going on after arriving there."""
  return VectorDecoder(1, units=units, activation=activation, squeeze=True,
                       name='continuation_decoder')
