"""What TFLite Micro's detection post-processing, slice-update, circular-buffer,
resource-variable, control-flow and weight-decoding kernels allocate (issue 60, item 2), as
`kernels.Node` events. Read from
TFLM 90b983c2's ``kernels/`` (none has a CMSIS-NN version); sizes compiled from its headers
for both targets.

* ``DETECTION_POSTPROCESS`` (the custom operator ``TFLite_Detection_PostProcess``, flexbuffer
  options; no builtin options): op data of 112 B on both targets (``Init``), then in
  ``Prepare`` its three inputs as temporaries and 11 scratch buffers (``num_boxes`` x ...:
  1 B, 16 B, classes x 4, 4, 4, max_detections x 4, max_detections x 4, 4, max_detections x
  4, max(classes, max_detections) x 4, min(boxes, max_detections) x 4). Float32 inputs only.
* ``DYNAMIC_UPDATE_SLICE``: no ``Init``, no builtin options; its three inputs and the output
  as temporaries.
* ``CIRCULAR_BUFFER`` (custom): op data of 8 B (``Init``); input and output as temporaries;
  int8 only.
* ``VAR_HANDLE`` / ``READ_VARIABLE`` / ``ASSIGN_VARIABLE``: the interpreter needs a
  ``MicroResourceVariables`` (12 / 16 B) and an array of one ``MicroResourceVariable`` (20 /
  40 B) per distinct ``shared_name`` in the tail before anything else of the model, as the
  ``tflite-micro`` package creates them (`resource_variables`); VAR_HANDLE keeps 4 B of op
  data and its builtin options (two pointers); READ_VARIABLE reads its resource id as a
  temporary; ASSIGN_VARIABLE (op data of 4 B with ``USE_TFLM_COMPRESSION``: the host) reads
  its value as a temporary and, the first time a variable is assigned, allocates the
  variable's buffer (the value's bytes, 16-aligned) in the tail.
* ``DECODE`` (the custom ``TFLM_DECODE``, ``AddDecode``; weights decoded at run time: inputs
  in pairs, a constant encoded tensor and a constant ancillary tensor whose first byte is the
  decode type, one output per pair): no ``Init``, no builtin options. ``Prepare`` keeps an
  array of one pointer per output, then per pair reads the three tensors as temporaries and
  keeps the decode type's state (``DecodeStateLut`` 36 / 72 B, ``DecodeStateHuffman`` 28 /
  56, ``DecodeStatePrune`` 40 / 80: `abi.DECODE_STATE`) and, PRUNE of an int8 output
  quantized per channel with a non-zero zero point, a copy of its zero points (1 B each).
  The outputs are planned as any other tensor: the board's runner gives no alternate
  decompression memory, nor does the host package by default
  (``alt_decompression_memory_size=0``; with one, those outputs would leave the arena: not
  priced). Prepare fails, whatever the arena, for the file's mistakes TFLM checks (version,
  type, axis, zero points, non-constant inputs): those are not priced.
"""
from __future__ import annotations

from .abi import DECODE_STATE, FLOAT32, INT8, UnpricedModelError


def _custom_options(n) -> dict:
    from flatbuffers import flexbuffers

    raw = n.custom_options
    if raw is None or len(raw) == 0:
        return {}
    try:
        opts = flexbuffers.Loads(bytes(bytearray(raw)))
    except Exception as e:  # noqa: BLE001 - any malformed flexbuffer
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): unreadable custom options "
                                 f"({type(e).__name__})") from None
    return opts if isinstance(opts, dict) else {}


def _detection_postprocess(n, cmsis: bool):
    if len(n.ins) != 3 or len(n.outs) != 4:
        raise UnpricedModelError(f"operator {n.v} (DETECTION_POSTPROCESS) has {len(n.ins)} "
                                 f"inputs and {len(n.outs)} outputs, not 3 and 4")
    boxes, scores, anchors = n.inp(0), n.inp(1), n.inp(2)
    n.need(boxes, scores, anchors)
    if len(boxes.shape) != 3 or len(scores.shape) != 3 or len(anchors.shape) != 2:
        raise UnpricedModelError(f"operator {n.v} (DETECTION_POSTPROCESS): boxes and scores "
                                 "of rank 3 and anchors of rank 2 only")
    if boxes.type != FLOAT32 or scores.type != FLOAT32:
        raise UnpricedModelError(f"operator {n.v} (DETECTION_POSTPROCESS): TFLite Micro's "
                                 "kernel takes float32 boxes and scores only")
    opts = _custom_options(n)
    try:
        max_det, classes = int(opts["max_detections"]), int(opts["num_classes"])
    except (KeyError, TypeError, ValueError):
        raise UnpricedModelError(f"operator {n.v} (DETECTION_POSTPROCESS): no max_detections "
                                 "or num_classes in its custom options") from None
    n.tin(0), n.tin(1), n.tin(2)
    boxes_n = boxes.shape[1]
    for size in (boxes_n, boxes_n * 4 * 4, scores.shape[1] * scores.shape[2] * 4,
                 boxes_n * 4, boxes_n * 4, max_det * boxes_n * 4, max_det * boxes_n * 4,
                 boxes_n * 4, max_det * boxes_n * 4, max(classes, max_det) * boxes_n * 4,
                 min(boxes_n, max_det) * boxes_n * 4):
        n.scratch(size)


def _dynamic_update_slice(n, cmsis: bool):
    if len(n.ins) != 3 or len(n.outs) != 1:
        raise UnpricedModelError(f"operator {n.v} (DYNAMIC_UPDATE_SLICE) has {len(n.ins)} "
                                 f"inputs and {len(n.outs)} outputs, not 3 and 1")
    n.need(n.inp(0), n.inp(1), n.inp(2), n.out(0))
    n.tin(0), n.tin(1), n.tin(2), n.tout(0)


def _circular_buffer(n, cmsis: bool):
    x, y = n.inp(0), n.out(0)
    n.need(x, y)
    if x.type != INT8 or len(x.shape) != 4 or len(y.shape) != 4:
        raise UnpricedModelError(f"operator {n.v} (CIRCULAR_BUFFER): 4-D int8 tensors only")
    n.tin(0), n.tout(0)


def _var_handle(n, cmsis: bool):
    n.need(n.out(0))
    n.state.setdefault("ids", {}).setdefault(_shared_name(n), len(n.state["ids"]))
    n.state.setdefault("tensor_ids", {})[n.sg, n.outs[0]] = n.state["ids"][_shared_name(n)]


def _read_variable(n, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0)


def _assign_variable(n, cmsis: bool):
    if len(n.ins) != 2 or n.outs:
        raise UnpricedModelError(f"operator {n.v} (ASSIGN_VARIABLE) has {len(n.ins)} inputs "
                                 f"and {len(n.outs)} outputs, not 2 and 0")
    value = n.inp(1)
    n.need(n.inp(0), value)
    n.tin(1)
    rid = n.state.get("tensor_ids", {}).get((n.sg, n.ins[0]))
    done = n.state.setdefault("assigned", set())
    if rid is not None and rid not in done:  # the variable's buffer, once
        done.add(rid)
        n.persist(value.bytes)


_LUT, _HUFFMAN, _PRUNE = 0, 1, 2


def _decode(n, cmsis: bool):
    def fail(why):
        raise UnpricedModelError(f"operator {n.v} (DECODE): {why}; TFLite Micro's Prepare "
                                 "fails at any arena size")

    nout = len(n.outs)
    if nout == 0 or len(n.ins) != 2 * nout:
        fail(f"{len(n.ins)} inputs and {nout} outputs, not two inputs per output")
    abi = n.abi
    n.persist(abi.word * nout)  # DecodeState* per output
    for i in range(nout):
        enc, anc, y = n.inp(2 * i), n.inp(2 * i + 1), n.out(i)
        n.need(enc, anc, y)
        n.tin(2 * i), n.tin(2 * i + 1)
        if not enc.const or not anc.const:
            fail(f"output {i}'s encoded or ancillary tensor is not constant")
        raw = bytes(anc.data[:16]) if anc.data is not None else b""
        if len(raw) < 16:
            fail(f"output {i}'s ancillary data is shorter than the 16-byte metadata")
        kind = raw[0]
        if raw[1] != 1 or kind not in (_LUT, _HUFFMAN, _PRUNE) or raw[4] != 1:
            fail(f"output {i}: decode type {kind}, version {raw[1]}.{raw[4]} (TFLite Micro "
                 "decodes LUT 0, Huffman 1 and prune 2, version 1.1)")
        # the output as a temporary; the state's Setup reads its quantization (LUT and
        # PRUNE the quantized dimension, PRUNE the zero points too) after the state is
        # allocated: those bytes stay live
        ev = n.tensor_events(n.outs[i], "t")
        if len(ev) == 3 and kind != _HUFFMAN:
            ev[1] = ev[1][:3] + (abi.affine_quantization[0],)
            if kind == _PRUNE:
                ev[2] = ev[2][:3] + (ev[2][1],)
        n.events += ev
        n.persist(DECODE_STATE[abi.name][kind])
        zps = y.zero_points[:y.channels]
        if kind != _HUFFMAN and y.channels and y.axis != 0 and \
                not (y.axis == len(y.shape) - 1 and y.channels > 1):
            fail(f"output {i} is quantized along axis {y.axis}, neither the first nor "
                 "(per channel) the last")
        if kind == _HUFFMAN and not raw[5] & 1 and y.type != INT8:
            fail(f"output {i}: a 16-bit Huffman table decodes int8 only")
        if kind == _PRUNE and any(int(z) != 0 for z in zps):
            if y.type != INT8:
                fail(f"output {i}: pruned values of a non-int8 tensor need zero points of 0")
            if y.channels > 1:
                n.persist(y.channels)  # the zero points, int8


def _calls(*attrs):
    """IF (reads its condition as a temporary), WHILE, CALL_ONCE: the subgraphs they run are
    prepared and planned with the rest (`arena._lifetimes`)."""
    def prepare(n, cmsis: bool):
        for a in attrs:
            callee = getattr(n.options, a, None)
            if callee is None or not 0 < int(callee) < len(n.subgraphs):
                raise UnpricedModelError(f"operator {n.v} ({n.kind}) calls subgraph "
                                         f"{callee!r}, not one of the file's others")
        if n.kind == "IF":
            n.need(n.inp(0))
            n.tin(0)
    return prepare


def _shared_name(n) -> str:
    name = getattr(n.options, "sharedName", None)
    return name.decode() if isinstance(name, bytes) else str(name)


def resource_variables(tg) -> int:
    """Distinct ``shared_name`` of the file's VAR_HANDLE operators: how many resource
    variables the ``tflite-micro`` package creates for it (``count_resource_variables``)."""
    from ..format.read import op_names

    names = op_names()
    codes = tg.model.operatorCodes or []
    found = set()
    for sg in tg.model.subgraphs or []:
        for op in sg.operators or []:
            c = codes[op.opcodeIndex]
            if names.get(max(int(c.builtinCode), int(c.deprecatedBuiltinCode))) == "VAR_HANDLE":
                found.add(getattr(op.builtinOptions, "sharedName", None))
    return len(found)


# custom operators TFLite Micro registers, by their custom code
CUSTOM = {"TFLite_Detection_PostProcess": "DETECTION_POSTPROCESS",
          "CIRCULAR_BUFFER": "CIRCULAR_BUFFER", "TFLM_DECODE": "DECODE"}

# custom operators stock TFLite Micro registers no kernel for: (name, why), named in the
# report instead of a bare custom code. Vela writes the Ethos-U NPU's command streams as the
# custom operator "ethos-u"; stock TFLM's AddEthosU() adds nothing (kernels/ethosu.cc:
# Register_ETHOSU() returns nullptr), so the interpreter rejects the file at any arena size.
UNREGISTERED = {"ethos-u": ("ETHOSU", "stock TFLite Micro registers no kernel for it "
                            "(Register_ETHOSU() returns nullptr): the file needs an Ethos-U "
                            "build of TFLite Micro")}

PREPARE = {
    "DETECTION_POSTPROCESS": _detection_postprocess,
    "DYNAMIC_UPDATE_SLICE": _dynamic_update_slice,
    "CIRCULAR_BUFFER": _circular_buffer,
    "VAR_HANDLE": _var_handle, "READ_VARIABLE": _read_variable,
    "ASSIGN_VARIABLE": _assign_variable,
    "CALL_ONCE": _calls("initSubgraphIndex"),
    "IF": _calls("thenSubgraphIndex", "elseSubgraphIndex"),
    "WHILE": _calls("condSubgraphIndex", "bodySubgraphIndex"),
    "DECODE": _decode,
}
