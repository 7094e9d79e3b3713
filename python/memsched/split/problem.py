"""The split-across-devices problem: operators in execution order with the geometry a split needs.

GenEFlow (MemoriaNova §3.3) splits every operator of a CNN over ``n`` devices along its output
channels (``cout``) or its output feature-map height (``fmh``). To price and check a split the
solvers need, per operator, only plain numbers, which this module extracts once:

* the output tensor's size along the channel axis (axis 1) and the height axis (axis 2 of an
  NCHW tensor), its bytes, and which split dimensions the operator supports;
* for each activation input, how an output slice maps to the *input region* it reads
  (`InputReq`): the whole input (a dense convolution split by cout, a matmul), the same
  channels/rows (element-wise, batch norm, concat with an offset, grouped convolutions by
  group), or a row window with halo (convolutions and pools split by fmh: rows
  ``[a*stride - pad, (b-1)*stride - pad + extent)`` clipped to the input);
* weight bytes (sliced along cout, replicated otherwise) and FLOPs (for a FLOP-based cost model
  when no measured kernel times are given).

Every Relax call binding of the (single) dataflow block is one operator, in the execution order
of MemoryAwareSchedule's scheduler (`memsched.schedule(graph, "auto")` on the block's `OpGraph`);
tuples, ``TupleGetItem`` and ``y = x`` are resolved to the tensor they name and are no
operators. An operator this module cannot split (a reshape, a strided slice, a concat on another
axis, anything unknown) is ``whole``: it runs on one device, which the encoding chooses.

The problem is plain Python (no TVM): the TVM adapter `memsched.transform.split_relax.from_relax`
builds it from a Relax module; tests build it by hand with `SplitProblem` / `SplitOp` /
`TensorInfo`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

DIMS = ("cout", "fmh", "whole")


class SplitError(ValueError):
    """A split request that cannot be answered: bad devices, bad chromosome, unsupported model."""


@dataclass
class TensorInfo:
    """An activation tensor: ``channels`` x ``rows`` cells of ``unit`` bytes each.

    ``channels`` is the size of axis 1 and ``rows`` of axis 2 (1 for tensors of rank < 3);
    ``unit`` covers the other axes (batch, width) times the element size."""

    name: str
    channels: int
    rows: int
    unit: int
    producer: int = -1  # problem op index; -1 for a graph input (held by the host)
    is_output: bool = False
    consumers: list[int] = field(default_factory=list)
    shape: tuple = ()
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return self.channels * self.rows * self.unit


@dataclass(frozen=True)
class InputReq:
    """How an output slice of the op maps to the region of input ``tensor`` it reads.

    ``cmode`` (channel range for a cout slice ``[a, b)``): ``full`` (all input channels),
    ``same`` (``[a, b)``; ``[0, 1)`` for a broadcast input with one channel), ``group``
    (grouped convolution: whole groups, ``cin_group`` input / ``cout_group`` output channels per
    group), ``offset`` (concat: ``[a - offset, b - offset)`` clipped to the input).
    ``rmode`` (row range for an fmh slice ``[a, b)``): ``full``, ``same`` (broadcast-aware
    like ``same`` above), ``window`` (rows ``[a*stride - pad, (b-1)*stride - pad + extent)``
    clipped to ``[0, rows)``; ``extent = (kernel-1)*dilation + 1``).
    A cout slice reads all rows and an fmh slice all channels, except ``offset`` (an fmh slice of
    a concat reads its rows of every input) and ``same`` channel broadcast.
    """

    tensor: int
    cmode: str = "full"
    rmode: str = "full"
    extent: int = 1
    stride: int = 1
    pad: int = 0
    cin_group: int = 0
    cout_group: int = 0
    offset: int = 0


@dataclass
class SplitOp:
    """One operator. ``dims`` maps each split dimension it supports to its length (output
    channels for ``cout``, output rows for ``fmh``); every op also supports ``whole``."""

    name: str
    kind: str  # e.g. relax.nn.conv2d
    cls: str  # conv, pool, eltwise, bn, concat, mean, dense, whole
    output: int  # tensor id
    inputs: list[InputReq]
    dims: dict
    weight_bytes: int = 0  # constants the op reads
    weight_cout: int = 0  # the part of weight_bytes that is sliced along cout
    flops: float = 0.0
    source: int = -1  # binding index in the Relax dataflow block
    # per argument of the Relax call: index into `inputs` (activation), a list of those (a
    # tuple argument), or None (constant / other); what the rewrite maps back to the call
    arg_reqs: list = field(default_factory=list)


@dataclass
class SplitProblem:
    """Operators in execution order over activation tensors (see the module docstring)."""

    ops: list[SplitOp]
    tensors: list[TensorInfo]
    name: str = "model"
    outputs: list[int] = field(default_factory=list)  # graph output tensors, in return order

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        nt = len(self.tensors)
        for t in self.tensors:
            t.consumers = []
        for i, op in enumerate(self.ops):
            if not 0 <= op.output < nt:
                raise SplitError(f"op {op.name!r}: output tensor {op.output} out of range")
            self.tensors[op.output].producer = i
            for d, length in op.dims.items():
                if d not in ("cout", "fmh") or int(length) < 1:
                    raise SplitError(f"op {op.name!r}: bad split dimension {d}={length}")
            for r in op.inputs:
                if not 0 <= r.tensor < nt:
                    raise SplitError(f"op {op.name!r}: input tensor {r.tensor} out of range")
                src = self.tensors[r.tensor].producer
                if src >= i:
                    raise SplitError(f"op {op.name!r} reads {self.tensors[r.tensor].name!r} "
                                     "before it is produced (ops must be in execution order)")
                if i not in self.tensors[r.tensor].consumers:
                    self.tensors[r.tensor].consumers.append(i)
        for t in self.outputs:
            self.tensors[t].is_output = True

    @property
    def n(self) -> int:
        return len(self.ops)

    def last_use(self, t: int) -> int:
        """Index of the last op reading tensor ``t`` (``n`` for a graph output: kept to the end;
        the producer itself for a tensor nobody reads)."""
        ten = self.tensors[t]
        if ten.is_output:
            return self.n
        return max(ten.consumers, default=ten.producer)

    @property
    def weight_bytes(self) -> int:
        return sum(op.weight_bytes for op in self.ops)
