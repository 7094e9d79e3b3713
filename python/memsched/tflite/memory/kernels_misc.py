"""What TFLite Micro's detection post-processing, slice-update, circular-buffer and
resource-variable kernels allocate (issue 60, item 2), as `kernels.Node` events. Read from
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
"""
from __future__ import annotations

from .abi import FLOAT32, INT8, UnpricedModelError


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
          "CIRCULAR_BUFFER": "CIRCULAR_BUFFER"}

PREPARE = {
    "DETECTION_POSTPROCESS": _detection_postprocess,
    "DYNAMIC_UPDATE_SLICE": _dynamic_update_slice,
    "CIRCULAR_BUFFER": _circular_buffer,
    "VAR_HANDLE": _var_handle, "READ_VARIABLE": _read_variable,
    "ASSIGN_VARIABLE": _assign_variable,
    "CALL_ONCE": _calls("initSubgraphIndex"),
    "IF": _calls("thenSubgraphIndex", "elseSubgraphIndex"),
    "WHILE": _calls("condSubgraphIndex", "bodySubgraphIndex"),
}
