"""`memsched.tflite.memory.arena` prices TFLite Micro's elementwise, comparison, logical and
shape kernels (issue 60, item 2: `memory.kernels_elementwise`): on one generated file per
operator (between convolutions; int8 and float32) the computed arena equals the emulated
Cortex-M55's minimal arena to the byte, with the same planned head and persistent tail, and
for ``target="host"`` the ``tflite-micro`` package's bisection. The int8 board files and the
float files of the kernels whose requests depend on the type run by default; the rest, and
every host bisection but a few (about 4 s each), are ``heavy``.
"""
from __future__ import annotations

import pytest

from memsched.generators import tflite_ops_elementwise as synth
from memsched.tflite import tflm
from memsched.tflite.memory.arena import arena, priced_operators

from test_tflite_arena_ops import _check_board, _check_host, _kinds

OPS = list(synth.OPERATORS)
# float32 files whose kernels ask for something else than in int8
TYPED = {"ADD_N", "LOG_SOFTMAX", "CUMSUM", "TRANSPOSE_CONV", "CAST", "ELU"}
# host bisections run by default: kernels whose records differ at 64 bits
HOST_DEFAULT = {("ADD_N", True), ("LOG_SOFTMAX", True), ("TRANSPOSE_CONV", True),
                ("CAST", False)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("arena_elementwise")
    out = {}
    for quantized in (True, False):
        for op in OPS:
            p = d / f"{op.lower()}_{'int8' if quantized else 'f32'}.tflite"
            p.write_bytes(synth.elementwise_model(op, quantized))
            out[op, quantized] = str(p)
    for quantized in (True, False):  # CMSIS-NN's reverse-convolution path: > 16 channels
        p = d / f"transpose_conv_wide_{'int8' if quantized else 'f32'}.tflite"
        p.write_bytes(synth.elementwise_model("TRANSPOSE_CONV", quantized, seed=3, size=6,
                                              channels=24))
        out["TRANSPOSE_CONV_WIDE", quantized] = str(p)
    return out


def _params(quantized_default):
    out = []
    for op in OPS + ["TRANSPOSE_CONV_WIDE"]:
        for quantized in (True, False):
            heavy = not (quantized or op in TYPED or op == "TRANSPOSE_CONV_WIDE") \
                if quantized_default else (op, quantized) not in HOST_DEFAULT
            marks = [pytest.mark.heavy] if heavy else []
            out.append(pytest.param(op, quantized, marks=marks,
                                    id=f"{op}-{'int8' if quantized else 'f32'}"))
    return out


@pytest.mark.parametrize("op,quantized", _params(True))
def test_operator_priced_as_the_board_allocates(op, quantized, files, fw, tmp_path):
    path = files[op, quantized]
    kind = op.replace("_WIDE", "")
    assert kind in _kinds(path) and kind in priced_operators()
    _check_board(path, tmp_path, kind)


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
@pytest.mark.parametrize("op,quantized", _params(False))
def test_operator_priced_as_the_host_package_allocates(op, quantized, files):
    _check_host(files[op, quantized])


def test_what_the_kernels_keep(files):
    """The requests behind the totals: ADD_N's pointer array as scratch (4 B per input on the
    Cortex-M, 8 on the host), MIRROR_PAD's two 4-B-per-dimension arrays, TRANSPOSE_CONV's int8
    scratch (the reference kernel's 4 B per output element; CMSIS-NN's column buffer and an
    empty reversed-filter buffer below 17 input channels), DEPTH_TO_SPACE's dims copy."""
    def scratch(op, quantized=True, target="cortex-m"):
        kind = op.replace("_WIDE", "")
        return [s[2] for s in arena(files[op, quantized], target).scratch if s[1] == kind]

    assert scratch("ADD_N") == [16] and scratch("ADD_N", target="host") == [32]
    assert scratch("ADD_N", False) == [16]
    assert scratch("MIRROR_PAD") == scratch("MIRROR_PAD", target="host") == [16, 16]
    # 8 channels in, 4 out, 8x8 -> 16x16, stride 2, 3x3
    assert scratch("TRANSPOSE_CONV", target="host") == [16 * 16 * 4 * 4]
    assert scratch("TRANSPOSE_CONV") == [(7 * 2 + 3) * 4 * 3 * 4, 0]
    # 24 channels in: the reverse convolution's im2col and the reversed filter
    assert scratch("TRANSPOSE_CONV_WIDE") == [4 * 14 * 16, 24 * 9 * 12]
    assert not scratch("TRANSPOSE_CONV", False)
    for op in ("SIN", "EQUAL", "SLICE", "DEPTH_TO_SPACE", "CUMSUM"):
        assert not scratch(op)
    # the same three convolutions' per-channel arrays, and the dims copy (4 + 4 x 4 B)
    kept = {op: arena(files[op, True]).tail_parts["prepare"]
            for op in ("SLICE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "GATHER_ND")}
    assert kept["DEPTH_TO_SPACE"] == kept["SPACE_TO_DEPTH"] == kept["GATHER_ND"] == \
        kept["SLICE"] + 32
