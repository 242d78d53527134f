"""Convolutions: ``Conv`` and ``ConvTranspose`` over 1, 2 or 3 spatial axes.

Both run on channels-last data (NHWC, NDHWC; a 1-D problem as NHWC with a height of 1),
with the weights in TensorFlow's filter layout; the transposes happen when a callable is
prepared. Where TensorFlow's CPU kernels lack a case, the graph composes it from what
they have (groups split into one convolution per group, 3-D pads by ``tf.pad``,
dilations by space-to-batch) and the operator's ``timed_notes`` say so; what no
composition reaches (dilated convolutions with strides, dilated transposed
convolutions: the CPU kernels have no gradient for them) is refused with a pointer to
the XLA backend, whose compiler has its own kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from d5_plugin_tensorflow.ops._base import Layout, Plan, Signature, TFOperator, tf
from d5_plugin_tensorflow.ops._spatial import (
    Window,
    channels_last,
    data_format,
    filter_layout,
    padding_argument,
    same_or_valid,
)
from d5core.onnx import ConvolutionRules, ConvRules, ConvTransposeRules

__all__ = ["Conv", "ConvTranspose"]

_LAYOUT_NOTE = "X, W and Y are moved between ONNX's layout and channels-last outside the timed call"
_LIFT_NOTE = "a 1-D problem runs as 2-D with a height of 1"


def _grouped(conv: Callable[[Any, Any], Any], group: int) -> Callable[[Any, Any], Any]:
    """``conv`` applied to each of ``group`` channel groups, the results concatenated:
    the input splits along its channels, the filter along its last axis."""
    if group == 1:
        return conv
    split, concat = tf.split, tf.concat

    def per_group(x: Any, w: Any) -> Any:
        parts = zip(split(x, group, axis=-1), split(w, group, axis=-1), strict=True)
        return concat([conv(a, b) for a, b in parts], axis=-1)

    return per_group


def _with_bias(conv: Callable[[Any, Any], Any]) -> Callable[..., tuple[Any]]:
    bias_add = tf.nn.bias_add

    def kernel(x: Any, w: Any, b: Any = None) -> tuple[Any]:
        y = conv(x, w)
        return (y if b is None else bias_add(y, b),)

    return kernel


class _Convolution(ConvolutionRules, TFOperator):
    window_class = Window

    def layout_of(self, sig: Signature) -> str:
        x = sig.shapes[0]
        assert x is not None
        return data_format(len(x) - 2)

    def _layouts(self, sig: Signature, out_shape: tuple[int, ...]) -> tuple[Any, ...]:
        x, w = sig.shapes[0], sig.shapes[1]
        assert x is not None and w is not None
        inputs: list[Layout | None] = [channels_last(x), filter_layout(w)]
        if len(sig.shapes) > 2 and sig.shapes[2] is not None:
            inputs.append(None)
        return tuple(inputs), (channels_last(out_shape),)


class Conv(ConvRules, _Convolution):
    """ONNX ``Conv``: ``tf.nn.conv2d`` (explicit, even asymmetric, pads) or
    ``tf.nn.conv3d`` (``tf.pad`` first unless TensorFlow's ``SAME`` or ``VALID`` is
    exact), then ``tf.nn.bias_add``.

    Groups: TensorFlow's CPU ``Conv2D`` runs grouped filters forward, but has no
    gradient for them, and ``Conv3D`` has none at all; there the graph splits the
    channels into one convolution per group. Dilations: the CPU kernels have no
    gradient for them (``Conv3D`` not even a forward), so dilated convolutions go
    through ``tf.nn.convolution`` (space-to-batch, as Keras runs them), which takes no
    strides with them. XLA compiles every case natively.
    """

    def _window(self, sig: Signature) -> Window:
        win: Window = super()._window(sig)
        if not self.xla and win.dilated and win.strided:
            raise self.refuse(
                f"TensorFlow's CPU kernels have no gradient for dilations {list(win.dilations)} "
                f"with strides {list(win.strides)} (tf.nn.convolution takes no strides with "
                f"dilations)"
            )
        return win

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        onnx = self._window(sig)
        x, w = sig.shapes[0], sig.shapes[1]
        assert x is not None and w is not None
        win = onnx.lifted()
        out = win.out_sizes()
        notes = [_LAYOUT_NOTE] + ([_LIFT_NOTE] if len(onnx.sizes) == 1 else [])
        strides, dilations, group = list(win.strides), list(win.dilations), self.group
        named = same_or_valid(win, out)
        pad, pads = tf.pad, padding_argument(win.pads)
        conv: Callable[[Any, Any], Any]
        if win.dilated and not self.xla:
            # CPU Conv2D runs dilations forward but has no gradient for them, Conv3D none
            # at all: tf.nn.convolution's space-to-batch (as Keras) has both.
            convolution = tf.nn.convolution
            notes.append("dilations: tf.nn.convolution (space-to-batch)")
            if named is None:
                notes.append("pads: tf.pad inside the graph")

            def conv(a: Any, b: Any) -> Any:
                a = a if named is not None else pad(a, pads)
                return convolution(a, b, 1, named or "VALID", dilations=dilations)

            native_groups = False
        elif len(win.sizes) == 2:
            conv2d = tf.nn.conv2d
            padding: Any = named if named is not None else pads

            def conv(a: Any, b: Any) -> Any:
                return conv2d(a, b, strides, padding, dilations=dilations)

            # Conv2D's CPU kernel runs groups forward; its filter gradient does not.
            native_groups = self.xla or not for_grad
        else:
            conv3d = tf.nn.conv3d
            if named is None:
                notes.append("pads: tf.pad inside the graph (Conv3D takes SAME or VALID only)")

            def conv(a: Any, b: Any) -> Any:
                a = a if named is not None else pad(a, pads)
                return conv3d(
                    a, b, [1, *strides, 1], named or "VALID", dilations=[1, *dilations, 1]
                )

            native_groups = self.xla
        if group > 1 and not native_groups:
            conv = _grouped(conv, group)
            notes.append(f"groups: {group} convolutions on channel slices, concatenated")
        inputs, outputs = self._layouts(sig, (x[0], w[0], *onnx.out_sizes()))
        return Plan(_with_bias(conv), inputs, outputs, tuple(notes))


class ConvTranspose(ConvTransposeRules, _Convolution):
    """ONNX ``ConvTranspose``: ``tf.nn.conv2d_transpose`` or ``conv3d_transpose``,
    then ``tf.nn.bias_add``.

    ONNX crops ``pads`` off the full result ``stride * (in - 1) + output_padding +
    (kernel - 1) * dilation + 1``; TensorFlow takes the output size and the padding of
    the convolution it transposes, so the crop is that padding (explicit pads in 2-D).
    Where TensorFlow cannot express it (3-D pads, an output beyond the full result,
    which ONNX fills with zeros), the graph transposes without padding, then slices and
    pads. ``output_shape`` and ``auto_pad`` SAME_* set the pads as ONNX prescribes.
    Groups are always split: TensorFlow's transposed convolutions have none.
    """

    def _geometry(
        self, sig: Signature
    ) -> tuple[Window, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The window, output padding, full (uncropped) sizes and output sizes."""
        win, output_padding, full, out = super()._geometry(sig)
        if not self.xla and win.dilated:
            raise self.refuse(
                f"TensorFlow's CPU kernels of transposed convolutions (Conv2DBackpropInput, "
                f"Conv3DBackpropInput) have no dilations {list(win.dilations)}"
            )
        return win, output_padding, full, out

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        onnx, output_padding, _, onnx_out = self._geometry(sig)
        x, w = sig.shapes[0], sig.shapes[1]
        assert x is not None and w is not None
        win = onnx.lifted()
        lift = (1,) if len(onnx_out) == 1 else ()
        out, extra = (*lift, *onnx_out), (*(0,) * len(lift), *output_padding)
        notes = [_LAYOUT_NOTE] + ([_LIFT_NOTE] if lift else [])
        transpose = tf.nn.conv2d_transpose if len(out) == 2 else tf.nn.conv3d_transpose
        strides, dilations = [1, *win.strides, 1], list(win.dilations)
        geometry = zip(win.strides, win.sizes, win.effective_kernel, extra, strict=True)
        # TensorFlow transposes the convolution of an input of the output's size padded
        # by (begin, end), a padded size it takes up to stride * in + kernel - 1; ONNX's
        # full result (with output_padding) may be longer only by zeros.
        padded = [min(s * (i - 1) + k + p, s * i + k - 1) for s, i, k, p in geometry]
        begins = win.begin_pads
        ends = [p - o - b for p, o, b in zip(padded, out, begins, strict=True)]
        unpadded = not any(begins) and not any(ends)
        conv: Callable[[Any, Any], Any]
        if all(e >= 0 for e in ends) and (len(out) == 2 or unpadded):
            shape = [x[0], *out, w[1]]
            pads = padding_argument(list(zip(begins, ends, strict=True)))
            padding: Any = "VALID" if unpadded else pads

            def conv(a: Any, b: Any) -> Any:
                return transpose(a, b, shape, strides, padding, dilations=dilations)

        else:
            notes.append("pads: TensorFlow cannot crop these; the graph slices and pads")
            conv = self._sliced(transpose, win, out, [x[0], 0, w[1]])
        if self.group > 1:
            conv = _grouped(conv, self.group)
            notes.append(
                f"groups: {self.group} transposed convolutions on channel slices, concatenated"
            )
        inputs, outputs = self._layouts(sig, (x[0], w[1] * self.group, *onnx_out))
        return Plan(_with_bias(conv), inputs, outputs, tuple(notes))

    @staticmethod
    def _sliced(
        transpose: Any, win: Window, out: tuple[int, ...], batch_channels: list[int]
    ) -> Callable[[Any, Any], Any]:
        """The transposed convolution without padding, then ONNX's crop by slicing and
        any output beyond the full result by zeros (``tf.pad``)."""
        strides, dilations = [1, *win.strides, 1], list(win.dilations)
        bare = [
            s * (i - 1) + k
            for s, i, k in zip(win.strides, win.sizes, win.effective_kernel, strict=True)
        ]
        shape = [batch_channels[0], *bare, batch_channels[-1]]
        spans = list(zip(win.begin_pads, out, bare, strict=True))
        begin = [0, *win.begin_pads, 0]
        stop = [0, *(min(b + o, f) for b, o, f in spans), 0]
        extend = [[0, 0], *([0, max(0, b + o - f)] for b, o, f in spans), [0, 0]]
        edges = 1 | 1 << (len(out) + 1)
        slice_, pad = tf.strided_slice, tf.pad

        def conv(a: Any, b: Any) -> Any:
            y = transpose(a, b, shape, strides, "VALID", dilations=dilations)
            return pad(slice_(y, begin, stop, begin_mask=edges, end_mask=edges), extend)

        return conv
