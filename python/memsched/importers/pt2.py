"""Reading a ``torch.export.save`` archive (``.pt2``) without running code from the file.

``torch.export.load`` is unsafe on untrusted files: it unpickles the sample inputs (falling back
to ``weights_only=False``), pickled weights and opaque constants, evaluates symbolic shape
expressions with ``sympy.sympify`` (an ``eval``), resolves node targets by walking attributes
of ``torch``/``operator``/``math`` (``torch.serialization.os.system`` is such a path, and it is
*called* when TVM re-traces the program), and turns ``guards_code`` strings into code. This
module reads the same archive (PyTorch 2.13's layout, archive version 0) with a whitelist
instead, and hands only checked, plain data to PyTorch's JSON deserializer:

* the zip is read with `zipfile`; member sizes are bounded (and compression ratios capped)
  before anything is read;
* the program is the JSON ``models/model.json``; every node target and operator argument must
  resolve to a PyTorch operator (``torch.ops.NS.OP[.OVERLOAD]``) or one of the symbolic-int
  builtins the serializer itself emits; every symbolic expression must parse (``ast``, never
  evaluated) into sympy constructors, names, numbers and arithmetic only; ``guards_code`` is
  dropped (guards check inputs at run time, which TVM does not use) and so is the
  ``source_fn_stack`` metadata (more names PyTorch would resolve by ``getattr``);
* weights and tensor constants are raw little-endian bytes described by JSON metadata: sizes,
  strides and offsets are checked against the record's length before a tensor is built;
* sample inputs are never read; anything stored as a pickle (tensor-subclass weights, script or
  opaque objects, the pre-2.8 layouts) is refused with `ModelLoadError`.

It uses PyTorch's private deserializer (``torch._export.serde``), so it is tied to the pinned
torch version; a layout it does not know is refused, never guessed.
"""
from __future__ import annotations

import ast
import json
import operator
import re
import zipfile

from ..errors import ModelLoadError

# Bounds on what a file may ask us to read or allocate.
MAX_MEMBERS = 1 << 16
MAX_MEMBER_BYTES = 1 << 34  # 16 GiB per record
MAX_TOTAL_BYTES = 1 << 35  # 32 GiB per archive (uncompressed)
MAX_JSON_BYTES = 1 << 28  # 256 MiB of program/config JSON
MAX_RATIO = 200  # uncompressed/compressed size of a deflated member (torch stores uncompressed)
MAX_TENSOR_BYTES = 1 << 40

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# sympy constructors srepr() emits for shape expressions, plus torch's sympy functions.
_SYMPY_NAMES = frozenset("""
    Symbol Integer Rational Float Half One Zero NegativeOne Infinity NegativeInfinity oo zoo nan
    true false BooleanTrue BooleanFalse Add Mul Pow Mod Max Min Abs floor ceiling sqrt Eq Ne Lt
    Le Gt Ge Equality Unequality StrictLessThan LessThan StrictGreaterThan GreaterThan And Or
    Not Piecewise ExprCondPair Tuple FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt
    FloorToInt CeilDiv LShift RShift PowByNatural FloatPow FloatTrueDiv IntTrueDiv
    IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat
    Identity OpaqueUnaryFn_sqrt
""".split())
_SYMPY_KEYWORDS = frozenset("""
    positive negative nonnegative nonpositive integer real finite infinite precision evaluate
    commutative zero nonzero even odd
""".split())
_SYMBOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def _fail(path: str, problem: str):
    raise ModelLoadError(f"cannot read model {path!r}: {problem}")


# ---------------------------------------------------------------- whitelists
def _builtin_targets() -> dict[str, object]:
    """The non-``torch.ops`` call targets the serializer writes (symbolic-int arithmetic and
    tuple indexing), spelled as it spells them."""
    from torch._export.serde.serialize import _SYM_OPS

    out = {}
    for f in list(_SYM_OPS) + [operator.getitem]:
        mod = f.__module__ or ""
        out[f"{mod}.{f.__name__}"] = f
    return out


def _check_target(path: str, target, where: str, builtins: dict) -> None:
    import torch

    if not isinstance(target, str):
        _fail(path, f"{where}: operator is not a string")
    if target in builtins:
        return
    parts = target.split(".")
    if len(parts) in (4, 5) and parts[:2] == ["torch", "ops"] and \
            all(_IDENT.match(p) for p in parts[2:]):
        obj = torch.ops
        try:
            for p in parts[2:]:
                obj = getattr(obj, p)
        except Exception:  # noqa: BLE001 - unknown op: the message below says so
            obj = None
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket,
                            torch._ops.HigherOrderOperator)):
            return
        _fail(path, f"{where} calls {target!r}, which is not a PyTorch operator known here")
    _fail(path, f"{where} calls {target[:120]!r}, which is not a PyTorch operator; "
                "refusing to resolve it")


def _check_sym_expr(path: str, text, where: str) -> None:
    """A shape expression is evaluated by sympy; accept only constructor calls, names, numbers
    and arithmetic (checked on the ``ast`` tree, which parsing does not execute)."""
    if not isinstance(text, str) or len(text) > 10_000:
        _fail(path, f"{where}: malformed symbolic expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        _fail(path, f"{where}: malformed symbolic expression")
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.Load, ast.BinOp, ast.UnaryOp, ast.Add,
                               ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd,
                               ast.keyword))
        if isinstance(node, ast.Call):
            ok = isinstance(node.func, ast.Name) and node.func.id in _SYMPY_NAMES
        elif isinstance(node, ast.Name):
            ok = node.id in _SYMPY_NAMES or bool(_SYMBOL_NAME.match(node.id)) and \
                "__" not in node.id
        elif isinstance(node, ast.Constant):
            v = node.value
            ok = isinstance(v, (bool, int, float)) or v is None or \
                (isinstance(v, str) and bool(re.match(r"^[A-Za-z0-9_.+\-e]{1,64}$", v)))
        elif isinstance(node, ast.keyword):
            ok = node.arg in _SYMPY_KEYWORDS
        if not ok:
            _fail(path, f"{where}: symbolic expression {text[:80]!r} is not a plain sympy "
                        "expression; refusing to evaluate it")


def _check_program(path: str, doc) -> None:
    """Walk the program JSON: node targets, operator arguments, symbolic expressions."""
    builtins = _builtin_targets()
    stack = [(doc, "program")]
    seen = 0
    while stack:
        obj, where = stack.pop()
        seen += 1
        if seen > 50_000_000:
            _fail(path, "program JSON is too large")
        if isinstance(obj, dict):
            if "target" in obj and "inputs" in obj and "outputs" in obj:
                _check_target(path, obj["target"], f"node in {where}", builtins)
                meta = obj.get("metadata")
                if isinstance(meta, dict):
                    # names resolved by getattr into the node's meta; nothing needs them
                    meta.pop("source_fn_stack", None)
            for k, v in obj.items():
                if k == "as_operator":
                    _check_target(path, v, f"operator argument in {where}", builtins)
                elif k == "expr_str":
                    _check_sym_expr(path, v, f"symbolic value in {where}")
                elif isinstance(v, (dict, list)):
                    stack.append((v, where))
        elif isinstance(obj, list):
            stack.extend((v, where) for v in obj if isinstance(v, (dict, list)))


# ---------------------------------------------------------------- archive
class _Archive:
    """Bounded access to the members of one ``.pt2`` zip under its single root folder."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
            infos = self.zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
            _fail(path, f"not a readable .pt2 archive (zip): {e}")
        if not infos:
            _fail(path, "empty .pt2 archive")
        if len(infos) > MAX_MEMBERS:
            _fail(path, f"archive has {len(infos)} members (limit {MAX_MEMBERS})")
        total = 0
        self.members: dict[str, zipfile.ZipInfo] = {}
        roots = set()
        for info in infos:
            name = info.filename
            if name.endswith("/"):
                continue
            if info.file_size > MAX_MEMBER_BYTES:
                _fail(path, f"archive member {name!r} claims {info.file_size:,} bytes "
                            f"(limit {MAX_MEMBER_BYTES:,})")
            if info.compress_type != zipfile.ZIP_STORED and \
                    info.file_size > MAX_RATIO * max(info.compress_size, 1024):
                _fail(path, f"archive member {name!r} has a compression ratio above "
                            f"{MAX_RATIO} (zip bomb?)")
            total += info.file_size
            root, sep, rest = name.partition("/")
            if not sep or not rest:
                _fail(path, f"archive member {name!r} is outside the archive's root folder")
            roots.add(root)
            self.members[rest] = info
        if total > MAX_TOTAL_BYTES:
            _fail(path, f"archive claims {total:,} bytes uncompressed "
                        f"(limit {MAX_TOTAL_BYTES:,})")
        if len(roots) != 1:
            _fail(path, f"archive has {len(roots)} root folders; a torch.export archive has one")

    def __contains__(self, name: str) -> bool:
        return name in self.members

    def size(self, name: str) -> int:
        return self.members[name].file_size

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        info = self.members.get(name)
        if info is None:
            _fail(self.path, f"archive has no {name!r} (not a torch.export.save archive of "
                             "this PyTorch version)")
        if info.file_size > limit:
            _fail(self.path, f"archive member {name!r} is {info.file_size:,} bytes "
                             f"(limit {limit:,})")
        try:
            data = self.zf.read(info)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            _fail(self.path, f"archive member {name!r} is corrupt: {e}")
        if len(data) != info.file_size:
            _fail(self.path, f"archive member {name!r} is truncated")
        return data

    def json(self, name: str):
        raw = self.read(name, MAX_JSON_BYTES)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            _fail(self.path, f"archive member {name!r} is not valid JSON ({e})")


def _int(path: str, v, what: str) -> int:
    if isinstance(v, dict) and set(v) == {"as_int"}:
        v = v["as_int"]
    if not isinstance(v, int) or isinstance(v, bool):
        _fail(path, f"{what} is not a static integer")
    return v


def _load_payloads(path: str, ar: _Archive, config_name: str, directory: str, what: str):
    """``{fqn: tensor}`` from a weights/constants config: raw records, checked views."""
    import torch
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    if config_name not in ar:
        legacy = [n for n in ar.members if n.startswith(directory) and n.endswith(".pt")]
        if legacy:
            _fail(path, f"{what} are stored as Python pickles (an older torch.export layout); "
                        "memsched does not unpickle model files: re-save with torch 2.13")
        _fail(path, f"archive has no {config_name!r}")
    config = ar.json(config_name)
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        _fail(path, f"{config_name!r} is malformed")
    records: dict[str, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for fqn, meta in entries.items():
        if not isinstance(meta, dict) or not isinstance(meta.get("path_name"), str):
            _fail(path, f"{what} entry {fqn!r} is malformed")
        name = meta["path_name"]
        if meta.get("use_pickle") or not name.startswith(("weight_", "tensor_")):
            _fail(path, f"{what} entry {fqn!r} is stored as a Python object ({name!r}); "
                        "memsched does not unpickle model files")
        tm = meta.get("tensor_meta")
        if not isinstance(tm, dict):
            _fail(path, f"{what} entry {fqn!r} has no tensor metadata")
        dtype = _SERIALIZE_TO_TORCH_DTYPE.get(tm.get("dtype")) \
            if isinstance(tm.get("dtype"), int) else None
        if dtype is None:
            _fail(path, f"{what} {fqn!r} has unknown dtype code {tm.get('dtype')!r}")
        sizes = [_int(path, s, f"{what} {fqn!r} size") for s in tm.get("sizes") or []]
        strides = [_int(path, s, f"{what} {fqn!r} stride") for s in tm.get("strides") or []]
        offset = _int(path, tm.get("storage_offset", {"as_int": 0}), f"{what} {fqn!r} offset")
        if len(sizes) != len(strides) or any(not 0 <= s < 1 << 62 for s in sizes + strides) \
                or not 0 <= offset < 1 << 62:
            _fail(path, f"{what} {fqn!r} has negative, absurd or mismatched sizes/strides")
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for s in sizes:
            numel *= s
        if numel * itemsize > MAX_TENSOR_BYTES:
            _fail(path, f"{what} {fqn!r} has {numel * itemsize:,} bytes (limit "
                        f"{MAX_TENSOR_BYTES:,})")
        record = directory + name
        if record not in ar:
            _fail(path, f"{what} {fqn!r}: record {record!r} is missing")
        if name not in records:
            nbytes = ar.size(record)
            if nbytes % itemsize:
                _fail(path, f"{what} record {name!r} has {nbytes} bytes, not a multiple of "
                            f"{itemsize} ({dtype})")
            data = bytearray(ar.read(record))
            records[name] = torch.frombuffer(data, dtype=dtype) if data else \
                torch.empty(0, dtype=dtype)
        flat = records[name]
        if flat.dtype != dtype:
            _fail(path, f"{what} record {name!r} is shared with a different dtype")
        if numel:
            last = offset + sum((s - 1) * st for s, st in zip(sizes, strides))
            if last >= flat.numel():
                _fail(path, f"{what} {fqn!r} reads past the end of its record {name!r}")
            t = torch.as_strided(flat, sizes, strides, offset)
        else:
            t = torch.empty(sizes, dtype=dtype)
        out[fqn] = torch.nn.Parameter(t, requires_grad=False) if meta.get("is_param") else t
    return out


def load_exported_program(path: str, model_name: str = "model"):
    """The ``torch.export.ExportedProgram`` saved in ``path``, read without unpickling or
    evaluating anything from the file (see the module docstring); `ModelLoadError` otherwise."""
    try:
        return _load(path, model_name)
    except ModelLoadError:
        raise
    except (Exception, RecursionError) as e:  # noqa: BLE001 - torch raises anything
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        _fail(path, f"malformed torch.export archive: {type(e).__name__}: "
                    f"{lines[0][:200] if lines else ''}")


def _load(path: str, model_name: str):
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    ar = _Archive(path)
    fmt = ar.read("archive_format", 64) if "archive_format" in ar else b""
    if fmt.strip() != b"pt2":
        if "serialized_exported_program.json" in ar or "version" in ar:
            _fail(path, "saved by torch <= 2.7 (an older .pt2 layout that stores pickles); "
                        "re-save it with torch.export.save from torch 2.13")
        _fail(path, "not a torch.export.save archive (no 'archive_format' = pt2)")
    version = ar.read("archive_version", 64).strip() if "archive_version" in ar else b""
    if version != b"0":
        _fail(path, f"unsupported .pt2 archive version {version[:16]!r} (expected 0)")
    if "byteorder" in ar and ar.read("byteorder", 64).strip() not in (b"little", b""):
        _fail(path, "big-endian archive is not supported")
    models = sorted(n for n in ar.members if n.startswith("models/") and n.endswith(".json"))
    if f"models/{model_name}.json" not in models:
        _fail(path, f"archive holds no program {model_name!r} (found {models[:5]})")
    if any(n.startswith(("data/aotinductor/", "data/executorch/")) for n in ar.members):
        _fail(path, "archive holds compiled (AOTInductor/ExecuTorch) code; refusing to load it")
    doc = ar.json(f"models/{model_name}.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("graph_module"), dict):
        _fail(path, "program JSON is malformed")
    _check_program(path, doc)
    doc["guards_code"] = []
    state_dict = _load_payloads(path, ar, f"data/weights/{model_name}_weights_config.json",
                                "data/weights/", "weight")
    constants = _load_payloads(path, ar, f"data/constants/{model_name}_constants_config.json",
                               "data/constants/", "constant")
    try:
        serialized = _dict_to_dataclass(schema.ExportedProgram, doc)
        return ExportedProgramDeserializer().deserialize(serialized, state_dict, constants, None)
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - torch's deserializer raises anything
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        _fail(path, f"malformed torch.export program: {type(e).__name__}: "
                    f"{lines[0][:200] if lines else ''}")
