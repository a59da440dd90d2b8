"""The fast decoder kernels compute what Keras' Conv2DTranspose computes.

Each fast layer is compared with a plain `Conv2DTranspose` holding the same
weights: outputs, input gradients and weight gradients must agree to float
round-off. A wrong phase order, kernel flip or gradient formula in
`conv_kernels` changes these by O(1).
"""
import numpy as np
import pytest
import tensorflow as tf

from planet_tfa.networks import conv_kernels
from planet_tfa.networks import decoders

ATOL = 1e-4


def _pair(fast_cls, filters, kernel, input_shape, activation=None, seed=0):
  tf.random.set_seed(seed)
  fast = fast_cls(filters, kernel, 2, activation=activation)
  plain = tf.keras.layers.Conv2DTranspose(filters, kernel, 2, activation=activation)
  fast.build(input_shape)
  plain.build(input_shape)
  rng = np.random.default_rng(seed)
  # Non-zero bias so a dropped or misplaced bias shows.
  for var in fast.weights:
    var.assign(rng.normal(size=var.shape).astype(np.float32) * 0.1)
  for src, dst in zip(fast.weights, plain.weights):
    dst.assign(src)
  return fast, plain


def _outputs_and_grads(layer, inputs, upstream):
  with tf.GradientTape() as tape:
    tape.watch(inputs)
    outputs = layer(inputs)
    # A random upstream gradient exercises every output position.
    loss = tf.reduce_sum(outputs * upstream)
  grads = tape.gradient(loss, [inputs] + layer.trainable_variables)
  return outputs, grads


@pytest.mark.parametrize('fast_cls,filters,kernel,in_hw,in_ch,activation', [
    (conv_kernels.MatmulConv2DTranspose, 12, 5, 1, 40, 'relu'),   # decoder layer 1
    (conv_kernels.SubpixelConv2DTranspose, 3, 6, 30, 8, None),     # output layer
    (conv_kernels.SubpixelConv2DTranspose, 8, 6, 13, 16, 'relu'),  # layer 3
    (conv_kernels.SubpixelConv2DTranspose, 5, 4, 7, 6, None),      # another even kernel
])
def test_fast_layer_matches_conv2d_transpose(fast_cls, filters, kernel, in_hw, in_ch,
                                             activation):
  shape = [3, in_hw, in_hw, in_ch]
  fast, plain = _pair(fast_cls, filters, kernel, shape, activation)
  inputs = tf.random.stateless_normal(shape, seed=[1, 2])
  out_hw = (in_hw - 1) * 2 + kernel
  upstream = tf.random.stateless_normal([3, out_hw, out_hw, filters], seed=[3, 4])
  fast_out, fast_grads = _outputs_and_grads(fast, inputs, upstream)
  plain_out, plain_grads = _outputs_and_grads(plain, inputs, upstream)
  assert fast_out.shape == plain_out.shape == (3, out_hw, out_hw, filters)
  np.testing.assert_allclose(fast_out, plain_out, atol=ATOL)
  for name, fast_grad, plain_grad in zip(['input', 'kernel', 'bias'], fast_grads, plain_grads):
    assert fast_grad is not None, name
    np.testing.assert_allclose(fast_grad, plain_grad, atol=ATOL * 10, err_msg=name)


def test_layers_fall_back_outside_their_fast_case():
  # A 3x3 input to the matmul layer, an odd kernel to the sub-pixel layer.
  for fast_cls, kernel, in_hw in [(conv_kernels.MatmulConv2DTranspose, 5, 3),
                                  (conv_kernels.SubpixelConv2DTranspose, 5, 4)]:
    fast, plain = _pair(fast_cls, 4, kernel, [2, in_hw, in_hw, 6])
    inputs = tf.random.stateless_normal([2, in_hw, in_hw, 6], seed=[5, 6])
    np.testing.assert_allclose(fast(inputs), plain(inputs), atol=ATOL)


def test_unsupported_padding_is_refused():
  layer = conv_kernels.SubpixelConv2DTranspose(4, 6, 2, padding='same')
  with pytest.raises(ValueError, match='padding="valid"'):
    layer(tf.zeros([1, 5, 5, 2]))


def test_decoder_checkpoints_move_between_fast_and_plain(tmp_path):
  fast = decoders.ImageDecoder(channels=3, depth=8, fast_kernels=True)
  plain = decoders.ImageDecoder(channels=3, depth=8, fast_kernels=False)
  features = tf.random.stateless_normal([2, 4, 20], seed=[7, 8])
  fast(features)
  plain(features)
  rng = np.random.default_rng(1)
  for var in fast.weights:
    var.assign(rng.normal(size=var.shape).astype(np.float32) * 0.05)
  path = tf.train.Checkpoint(decoder=fast).write(str(tmp_path / 'fast'))
  tf.train.Checkpoint(decoder=plain).read(path).assert_consumed()
  for src, dst in zip(fast.weights, plain.weights):
    np.testing.assert_array_equal(src.numpy(), dst.numpy())
  np.testing.assert_allclose(fast(features), plain(features), atol=ATOL)
