"""Faster CPU formulations of the image decoder's transposed convs.

Both classes are `Conv2DTranspose` layers with the same variables (so
checkpoints move freely between them and the plain layer) and the same
results up to float round-off; only the kernels TF runs differ. Measured on
the 2-core EPYC at PlaNet's shapes (288 frames, depth 32, forward+backward;
`python -m bench.slac_shape_bench` gives the whole-step effect):

- `MatmulConv2DTranspose`: a transposed conv of a 1x1 input is one matmul
  [B, Cin] x [Cin, kh*kw*Cout]; oneDNN's deconv runs it at 60 GFLOP/s, the
  matmul at 170 (94 -> 33 ms).
- `SubpixelConv2DTranspose`: a stride-2 transposed conv with an even kernel
  is a stride-1 conv over the padded input with a kernel of size k/2 and 4x
  the output channels, followed by `depth_to_space`. oneDNN's deconv of the
  3-channel output layer runs at 33 GFLOP/s forward, the sub-pixel conv at 84
  (53 -> 21 ms). Its own backward is slower than TF's transposed-conv
  gradient, so the gradient is TF's (a stride-2 conv and a filter gradient).
"""
import tensorflow as tf


def _check_valid(layer):
  if layer.padding != 'valid' or layer.data_format != 'channels_last':
    raise ValueError(f'{type(layer).__name__} supports padding="valid" and '
                     'channels_last only.')
  if tuple(layer.dilation_rate) != (1, 1) or layer.output_padding is not None:
    raise ValueError(f'{type(layer).__name__} supports no dilation or output_padding.')


def _bias_and_activation(layer, outputs):
  """What Conv2DTranspose.call does after its convolution."""
  if layer.use_bias:
    outputs = tf.nn.bias_add(outputs, layer.bias)
  return layer.activation(outputs) if layer.activation is not None else outputs


class MatmulConv2DTranspose(tf.keras.layers.Conv2DTranspose):
  """Conv2DTranspose whose input is 1x1 spatially, run as one matmul."""

  def call(self, inputs):
    _check_valid(self)
    if tuple(inputs.shape[1:3]) != (1, 1):
      return super().call(inputs)
    kh, kw, cout, cin = self.kernel.shape
    # out[n, i, j, c] = sum_k x[n, k] * kernel[i, j, c, k]
    weights = tf.reshape(tf.transpose(self.kernel, [3, 0, 1, 2]), [cin, kh * kw * cout])
    outputs = tf.matmul(tf.reshape(inputs, [-1, cin]), weights)
    outputs = tf.reshape(outputs, [-1, kh, kw, cout])
    return _bias_and_activation(self, outputs)


def _subpixel_forward(inputs, kernel):
  """Stride-2 VALID transposed conv with an even kernel [k, k, Cout, Cin].

  Output row y = 2m + p (phase p) sums input rows m - j with kernel row
  2j + p, j < k/2: a correlation of the input, padded by k/2 - 1, with the
  phase-p rows of the kernel in reverse order.
  """
  kh, kw, cout, cin = kernel.shape
  th, tw = kh // 2, kw // 2
  phases = tf.reshape(kernel, [th, 2, tw, 2, cout, cin])   # jy, py, jx, px, co, ci
  phases = tf.reverse(phases, [0, 2])                     # q = k/2 - 1 - j
  phases = tf.transpose(phases, [0, 2, 5, 1, 3, 4])       # qy, qx, ci, py, px, co
  phases = tf.reshape(phases, [th, tw, cin, 4 * cout])    # depth_to_space order
  padded = tf.pad(inputs, [[0, 0], [th - 1, th - 1], [tw - 1, tw - 1], [0, 0]])
  return tf.nn.depth_to_space(tf.nn.conv2d(padded, phases, 1, 'VALID'), 2)


@tf.custom_gradient
def _subpixel_conv_transpose(inputs, kernel):
  outputs = _subpixel_forward(inputs, kernel)

  def grad(d_outputs):
    d_inputs = tf.nn.conv2d(d_outputs, kernel, 2, 'VALID')
    d_kernel = tf.raw_ops.Conv2DBackpropFilter(
        input=d_outputs, filter_sizes=tf.shape(kernel), out_backprop=inputs,
        strides=[1, 2, 2, 1], padding='VALID')
    return d_inputs, d_kernel

  return outputs, grad


class SubpixelConv2DTranspose(tf.keras.layers.Conv2DTranspose):
  """Stride-2, even-kernel Conv2DTranspose run as a sub-pixel conv."""

  def call(self, inputs):
    _check_valid(self)
    kh, kw = self.kernel_size
    if tuple(self.strides) != (2, 2) or kh % 2 or kw % 2:
      return super().call(inputs)
    # A tensor, not the variable: custom_gradient then differentiates the read
    # (in the compute dtype under a mixed-precision policy).
    outputs = _subpixel_conv_transpose(inputs, tf.convert_to_tensor(self.kernel))
    return _bias_and_activation(self, outputs)
