"""TFLite Micro's records on each target: the sizes and alignments `memory.arena` replays
(its docstring says where each goes), the builtin options and op data per operator, and the
per-node prices the patch search charges from the same tables (`persistent_price`).

Sizes are ``sizeof`` / ``alignof`` of TFLM's headers compiled by ``arm-none-eabi-g++
-mcpu=cortex-m55`` (``cortex-m``: 32-bit, short enums) and by the host ``g++`` with the
``tflite-micro`` package's defines (``host``: 64-bit, the package's own parse functions).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..format.read import TFLiteModelError

TARGETS = ("cortex-m", "host")
ALIGN = 16  # MicroArenaBufferAlignment()
PLANNER_BYTES_PER_BUFFER = 40  # GreedyMemoryPlanner::per_buffer_size()
MAX_SCRATCH_PER_OP = 12  # kMaxScratchBuffersPerOp
ONLINE = -1  # kOnlinePlannedBuffer


class UnpricedModelError(TFLiteModelError):
    """A model whose TFLite Micro arena `arena` cannot compute: an operator, tensor type or
    structure outside the priced set (the message names them), or one TFLite Micro itself
    rejects whatever the arena size."""


@dataclass(frozen=True)
class Abi:
    """Sizes and kernels of one target: (size, alignment) of TFLM's structs, builtin options
    and op data (Init's persistent buffer) per operator."""

    name: str
    kernels: str  # "cmsis-nn" or "reference"
    word: int  # sizeof(size_t) == sizeof(void*)
    # RecordingSingleArenaBufferAllocator, GreedyMemoryPlanner, RecordingMicroAllocator
    allocator_objects: tuple
    builtin_data_allocator: tuple
    subgraph_allocations: tuple
    eval_tensor: tuple
    node_and_registration: tuple
    tflite_tensor: tuple
    affine_quantization: tuple
    scratch_handle: tuple
    scratch_request: tuple
    allocation_info: tuple
    builtin: dict
    op_data: dict


# builtin options structs (sizeof, alignof) per operator: the parse function's Allocate<T>()
_BUILTIN_32 = {
    "CONV_2D": (28, 4), "DEPTHWISE_CONV_2D": (28, 4), "FULLY_CONNECTED": (5, 1),
    "AVERAGE_POOL_2D": (40, 4), "MAX_POOL_2D": (40, 4), "RESHAPE": (36, 4),
    "SOFTMAX": (4, 4), "ADD": (2, 1), "MUL": (1, 1), "CONCATENATION": (8, 4),
    "STRIDED_SLICE": (24, 4), "SQUEEZE": (36, 4), "MEAN": (1, 1), "SUM": (1, 1),
    "REDUCE_MAX": (1, 1), "REDUCE_MIN": (1, 1), "LEAKY_RELU": (4, 4), "SUB": (2, 1),
    "RESIZE_NEAREST_NEIGHBOR": (2, 1), "SPLIT": (4, 4), "SPLIT_V": (4, 4), "PACK": (8, 4),
    "UNPACK": (8, 4), "GATHER": (8, 4), "BATCH_MATMUL": (3, 1), "SVDF": (8, 4),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (16, 4),
}
_BUILTIN_32.update({
    "ARG_MAX": (1, 1), "ARG_MIN": (1, 1), "CAST": (2, 1), "CUMSUM": (2, 1),
    "DEPTH_TO_SPACE": (4, 4), "DIV": (1, 1), "L2_NORMALIZATION": (1, 1), "MIRROR_PAD": (1, 1),
    "RESIZE_BILINEAR": (2, 1), "SHAPE": (1, 1), "SPACE_TO_DEPTH": (4, 4),
    "TRANSPOSE_CONV": (16, 4), "L2_POOL_2D": (40, 4), "REDUCE_ALL": (1, 1),
    "VAR_HANDLE": (8, 4),  # kernels_misc; the custom operators have no builtin options
    "CALL_ONCE": (4, 4), "IF": (8, 4), "WHILE": (8, 4),
})
_BUILTIN_64 = dict(_BUILTIN_32, FULLY_CONNECTED=(32, 8), ADD=(8, 4), MUL=(4, 4), SUB=(8, 4),
                   SVDF=(12, 4), ARG_MAX=(4, 4), ARG_MIN=(4, 4), CAST=(8, 4), DIV=(4, 4),
                   L2_NORMALIZATION=(4, 4), MIRROR_PAD=(4, 4), SHAPE=(4, 4),
                   TRANSPOSE_CONV=(20, 4), VAR_HANDLE=(16, 8))

# op data: sizeof of what each kernel's Init allocates (16-byte aligned); None: no Init
_OP_DATA_COMMON = {
    "MUL": 36, "PAD": 56, "PADV2": 56, "STRIDED_SLICE": 84, "RELU": 28, "RELU6": 8,
    "LOGISTIC": 16, "MEAN": 44, "SUM": 44, "REDUCE_MAX": 44, "REDUCE_MIN": 44, "QUANTIZE": 32,
    "DEQUANTIZE": 32, "HARD_SWISH": 20, "LEAKY_RELU": 24, "SUB": 52, "TANH": 16,
    "RESHAPE": None, "SQUEEZE": None, "EXPAND_DIMS": None, "TRANSPOSE": None,
    "RESIZE_NEAREST_NEIGHBOR": None, "SPLIT": None, "SPLIT_V": None, "PACK": None,
    "UNPACK": None, "GATHER": None,
    # issue 60: the elementwise, comparison and shape kernels (kernels_elementwise)
    "ABS": 28, "RSQRT": 28, "DIV": 28, "SQUARED_DIFFERENCE": 112, "EQUAL": 32,
    "NOT_EQUAL": 32, "LESS": 32, "LESS_EQUAL": 32, "GREATER": 32, "GREATER_EQUAL": 32,
    "SELECT_V2": 1, "PRELU": 28, "ELU": 256, "L2_NORMALIZATION": 4, "SPACE_TO_BATCH_ND": 4,
    "MIRROR_PAD": 20,
    "SIN": None, "COS": None, "LOG": None, "SQRT": None, "SQUARE": None, "LOGICAL_NOT": None,
    "EXP": None, "CEIL": None, "ROUND": None, "NEG": None, "FLOOR": None, "ZEROS_LIKE": None,
    "CAST": None, "LOG_SOFTMAX": None, "MAXIMUM": None, "MINIMUM": None,
    "LOGICAL_AND": None, "LOGICAL_OR": None, "ARG_MAX": None, "ARG_MIN": None,
    "FLOOR_DIV": None, "FLOOR_MOD": None, "ADD_N": None, "CUMSUM": None, "SHAPE": None,
    "SLICE": None, "FILL": None, "BROADCAST_TO": None, "RESIZE_BILINEAR": None,
    "DEPTH_TO_SPACE": None, "SPACE_TO_DEPTH": None, "BATCH_TO_SPACE_ND": None,
    "L2_POOL_2D": None, "REVERSE_V2": None, "GATHER_ND": None, "EMBEDDING_LOOKUP": None,
    "BROADCAST_ARGS": None, "REDUCE_ALL": 44,
    # kernels_misc (DETECTION_POSTPROCESS and CIRCULAR_BUFFER: custom operators)
    "DETECTION_POSTPROCESS": 112, "DYNAMIC_UPDATE_SLICE": None, "CIRCULAR_BUFFER": 8,
    "VAR_HANDLE": 4, "READ_VARIABLE": None, "ASSIGN_VARIABLE": None,
    "CALL_ONCE": 8, "IF": 8, "WHILE": 8,
    "DECODE": None,  # the custom TFLM_DECODE: no Init; Prepare allocates (kernels_misc)
}
_OP_DATA_CMSIS = dict(_OP_DATA_COMMON, CONV_2D=60, DEPTHWISE_CONV_2D=60, FULLY_CONNECTED=72,
                      ADD=60, AVERAGE_POOL_2D=36, MAX_POOL_2D=36, SOFTMAX=64,
                      CONCATENATION=24, BATCH_MATMUL=36, SVDF=40,
                      UNIDIRECTIONAL_SEQUENCE_LSTM=912, TRANSPOSE_CONV=76)
_OP_DATA_REF = dict(_OP_DATA_COMMON, CONV_2D=80, DEPTHWISE_CONV_2D=80, FULLY_CONNECTED=72,
                    ADD=60, AVERAGE_POOL_2D=32, MAX_POOL_2D=32, SOFTMAX=80, CONCATENATION=80,
                    BATCH_MATMUL=32, SVDF=36, UNIDIRECTIONAL_SEQUENCE_LSTM=688,
                    TRANSPOSE_CONV=88, ASSIGN_VARIABLE=4)

ABIS = {
    "cortex-m": Abi("cortex-m", "cmsis-nn", 4, ((52, 4), (44, 4), (124, 4)), (8, 4), (8, 4),
                     (12, 4), (32, 4), (32, 4), (12, 4), (4, 4), (12, 4), (24, 4),
                     _BUILTIN_32, _OP_DATA_CMSIS),
    "host": Abi("host", "reference", 8, ((104, 8), (72, 8), (272, 8)), (16, 8), (24, 8),
                 (24, 8), (64, 8), (64, 8), (24, 8), (8, 8), (16, 8), (32, 8),
                 _BUILTIN_64, _OP_DATA_REF),
}

# DECODE's state per decode type (kernels_misc): sizeof DecodeStateLut (type 0),
# DecodeStateHuffman (1), DecodeStatePrune (2) per target (the sizes each Create* function
# passes to AllocatePersistentBuffer in the board's firmware and in the host package)
DECODE_STATE = {"cortex-m": {0: 36, 1: 28, 2: 40}, "host": {0: 72, 1: 56, 2: 80}}

# MicroResourceVariables and one MicroResourceVariable (kernels_misc): sizeof per target
RESOURCE_VARIABLES = {"cortex-m": (12, 20), "host": (16, 40)}

# TFLM's TfLiteTypeSizeOf per schema TensorType (INT4 counts one byte per element)
TYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8,
               13: 4, 15: 4, 16: 2, 17: 1, 18: 2}
FLOAT32, INT32, INT64, BOOL, INT16, INT8, INT4 = 0, 2, 4, 6, 7, 9, 17


def priced_operators() -> tuple[str, ...]:
    """The builtin operators `arena` prices (on both targets)."""
    return tuple(sorted(_OP_DATA_COMMON.keys() | _OP_DATA_CMSIS.keys()))

def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def round_down(x: int, a: int) -> int:
    return x // a * a


def persistent_price(target: str = "cortex-m"):
    """What the patch search charges per node and tensor on ``target``
    (`memory.model.TFLMPersistent`): the node struct, the eval tensor, and per operator kind its
    builtin options plus its kernel's op data (16-byte aligned), from the same tables `arena`
    replays."""
    from .model import TFLMPersistent

    abi = ABIS[target]
    data = {}
    for kind in set(abi.op_data) | set(abi.builtin):
        b = abi.builtin.get(kind, (0, 1))[0]
        d = abi.op_data.get(kind)
        data[kind] = round_up(b, abi.word) + (round_up(d, ALIGN) if d else 0)
    return TFLMPersistent(node=abi.node_and_registration[0], eval_tensor=abi.eval_tensor[0],
                          op_data=tuple(sorted(data.items())), default_op_data=48,
                          per_channel=8)
