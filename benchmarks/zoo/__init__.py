"""Benchmark zoo: the irregularly wired networks of the memory-scheduling papers (and a few
regular baselines) as PyTorch models, built offline and deterministically, with helpers to
import them into TVM Relax and to export ONNX.

    from benchmarks.zoo import NETWORKS, build_torch, build_relax, export_onnx
    model, x = build_torch("darts-v2-cifar")            # eval mode, batch 1, seeded weights
    mod = build_relax("darts-v2-cifar", fold_bn=True)   # tvm.IRModule, constants folded
    export_onnx("darts-v2-cifar", "out/darts.onnx")

Weights are random (``torch.manual_seed``) with non-trivial batch-norm statistics; the
architectures are written from the published genotypes / layer configurations (see README.md).
``fold_bn=True`` folds every batch norm that directly follows a convolution into it, as in the
papers' inference graphs.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["NETWORKS", "NetSpec", "build_torch", "build_relax", "export_onnx", "relax_stats",
           "names"]


@dataclass(frozen=True)
class NetSpec:
    name: str
    family: str
    builder: str  # "module:function"
    input_size: int  # square H = W
    dataset: str
    cells: str  # cells / stages, human readable
    channels: str
    source: str
    kwargs: dict = field(default_factory=dict)
    tags: tuple = ()  # "paper" nets of HMCOS / ILP tables, "baseline", "heavy"

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, 3, self.input_size, self.input_size)

    def builder_fn(self) -> Callable:
        import importlib

        mod, fn = self.builder.split(":")
        return getattr(importlib.import_module(f"{__name__}.{mod}"), fn)


def _specs():
    S = NetSpec
    return [
        S("nasnet-a-mobile", "nasnet", "nasnet:nasnet_a_mobile", 224, "ImageNet",
          "conv stem + 2 stem reduction cells, 3x4 normal + 2 reduction cells",
          "F=44, cells 264/528/1056", "TF-slim nasnet.py mobile_imagenet_config; Zoph et al. 2018",
          tags=("hmcos",)),
        S("nasnet-a-cifar", "nasnet", "nasnet:nasnet_a_cifar", 32, "CIFAR-10",
          "conv stem, 3x6 normal + 2 reduction cells", "F=32, cells 192/384/768",
          "TF-slim nasnet.py cifar_config; Zoph et al. 2018", tags=("hmcos",)),
        S("amoebanet-a-mobile", "amoebanet", "amoebanet:amoebanet_a_mobile", 224, "ImageNet",
          "conv stem + 2 stem reduction cells, 3x4 normal + 2 reduction cells",
          "N=4, F=50, cells 200/400/800",
          "TPU amoeba_net model_specs.py (amoeba_net_a); Real et al. 2019", tags=("hmcos", "ilp")),
        S("amoebanet-a-cifar", "amoebanet", "amoebanet:amoebanet_a_cifar", 32, "CIFAR-10",
          "conv stem, 3x6 normal + 2 reduction cells", "N=6, F=36, cells 144/288/576",
          "TPU amoeba_net model_specs.py (amoeba_net_a); Real et al. 2019", tags=("hmcos",)),
        S("darts-v2-imagenet", "darts", "darts:darts_v2_imagenet", 224, "ImageNet",
          "2 conv stems, 14 cells (reductions at 4, 9)", "C=48, cells 192/384/768",
          "DARTS_V2 genotype, NetworkImageNet; Liu et al. 2019", tags=("hmcos", "ilp")),
        S("darts-v2-cifar", "darts", "darts:darts_v2_cifar", 32, "CIFAR-10",
          "conv stem, 20 cells (reductions at 6, 13)", "C=36, cells 144/288/576",
          "DARTS_V2 genotype, NetworkCIFAR; Liu et al. 2019", tags=("hmcos",)),
        S("pnasnet-5-mobile", "pnasnet", "pnasnet:pnasnet5_mobile", 224, "ImageNet",
          "conv stem + 2 stem cells, 9 cells (stride 2 at 3, 6)", "F=54, cells 270/540/1080",
          "TF-slim pnasnet.py mobile_imagenet_config; Liu et al. 2018"),
    ] + [
        S(f"randwire-ws-{s}", "randwire", "randwire:randwire_ws", 224, "ImageNet",
          "2 convs, 3 random stages of 32 nodes", "C=78: 78/156/312, head 1280",
          "Xie et al. 2019 Table 2 small regime, WS(4, 0.75), own WS generator",
          kwargs={"seed": s}, tags=("hmcos", "ilp"))
        for s in (1, 2, 3)
    ] + [
        S("hrnet-w18-small-v1", "hrnet", "hrnet:hrnet", 224, "ImageNet",
          "stem, 1+1+1+1 modules, 1..4 branches", "16/32/64/128, head 2048",
          "HRNet-Image-Classification cls_hrnet_w18_small_v1 yaml", {"config": "w18_small_v1"},
          tags=("ilp",)),
        S("hrnet-w18-small-v2", "hrnet", "hrnet:hrnet", 224, "ImageNet",
          "stem, 1+1+3+2 modules, 1..4 branches", "18/36/72/144, head 2048",
          "HRNet-Image-Classification cls_hrnet_w18_small_v2 yaml", {"config": "w18_small_v2"},
          tags=("ilp",)),
        S("hrnet-w32", "hrnet", "hrnet:hrnet", 224, "ImageNet",
          "stem, 1+1+4+3 modules, 1..4 branches", "32/64/128/256, head 2048",
          "HRNet-Image-Classification cls_hrnet_w32 yaml", {"config": "w32"},
          tags=("ilp", "heavy")),
        S("resnet-50", "resnet", "resnet:resnet50", 224, "ImageNet", "stem, 3+4+6+3 bottlenecks",
          "256/512/1024/2048", "He et al. 2016", tags=("baseline",)),
        S("resnet-152", "resnet", "resnet:resnet152", 224, "ImageNet",
          "stem, 3+8+36+3 bottlenecks", "256/512/1024/2048", "He et al. 2016",
          tags=("baseline", "heavy")),
        S("densenet-121", "densenet", "densenet:densenet121", 224, "ImageNet",
          "stem, dense blocks 6/12/24/16", "k=32, 256/512/1024/1024", "Huang et al. 2017",
          tags=("baseline",)),
        S("densenet-201", "densenet", "densenet:densenet201", 224, "ImageNet",
          "stem, dense blocks 6/12/48/32", "k=32, 256/512/1792/1920", "Huang et al. 2017",
          tags=("baseline", "heavy")),
        S("inception-resnet-v2", "inception_resnet", "inception_resnet:inception_resnet_v2", 299,
          "ImageNet", "stem, 10 x A, red-A, 20 x B, red-B, 10 x C", "320/1088/2080, 1536",
          "Szegedy et al. 2017; TF-slim inception_resnet_v2.py", tags=("baseline", "heavy")),
        S("xception", "xception", "xception:xception", 299, "ImageNet",
          "entry 2 convs + 3 blocks, middle 8 blocks, exit", "128/256/728/1024/2048",
          "Chollet 2017", tags=("baseline",)),
        S("mobilenet-v2", "mobilenet", "mobilenet:mobilenet_v2", 224, "ImageNet",
          "stem, 17 inverted residuals, 1x1 conv", "16..320, 1280", "Sandler et al. 2018",
          tags=("baseline",)),
    ]


NETWORKS: dict[str, NetSpec] = {s.name: s for s in _specs()}


def names(tag: str | None = None) -> list[str]:
    return [n for n, s in NETWORKS.items() if tag is None or tag in s.tags]


def _spec(name: str) -> NetSpec:
    try:
        return NETWORKS[name]
    except KeyError:
        raise KeyError(f"unknown network {name!r}; known: {', '.join(NETWORKS)}") from None


def build_torch(name: str, fold_bn: bool = False, seed: int = 0, image_size: int | None = None,
                **overrides):
    """``(model, example_input)``: eval mode, batch 1, weights from ``torch.manual_seed(seed)``.

    ``overrides`` go to the builder (e.g. ``c=16, layers=5`` for DARTS, ``n=8, c=16`` for
    RandWire) to make reduced-size variants for tests; ``image_size`` changes the input.
    """
    import torch

    from .ops import fold_bn as _fold, randomize_bn

    spec = _spec(name)
    kwargs = dict(spec.kwargs)
    kwargs.update(overrides)
    size = image_size or spec.input_size
    if spec.family in ("nasnet", "amoebanet", "pnasnet") and image_size is not None:
        kwargs["image_size"] = size
    torch.manual_seed(seed)
    model = spec.builder_fn()(**kwargs)
    randomize_bn(model, seed)
    model.eval()
    if fold_bn:
        _fold(model)
    for p in model.parameters():
        p.requires_grad_(False)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, 3, size, size, generator=g)
    return model, x


def _export(model, x):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, (x,))


def build_relax(name: str, fold_bn: bool = False, seed: int = 0, **overrides):
    """torch.export -> Relax (default decomposition; keeps eval-mode batch norm correct) ->
    FoldConstant. Returns a `tvm.IRModule` with weights as constants, input named ``input``."""
    model, x = build_torch(name, fold_bn=fold_bn, seed=seed, **overrides)
    return relax_from_torch(model, x)


def relax_from_torch(model, x):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    ep = _export(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_exported_program(ep, keep_params_as_input=False,
                                    unwrap_unit_return_tuple=True)
    return relax.transform.FoldConstant()(mod)


def export_onnx(name: str, path, fold_bn: bool = False, seed: int = 0, opset: int = 17,
                dynamo: bool = False, **overrides):
    """Write ``name`` as ONNX to ``path`` (IR version 8, readable by onnxruntime).

    Uses the TorchScript exporter (``dynamo=False``): torch 2.13's default dynamo exporter needs
    the ``onnxscript`` package, which is not a dependency. With ``fold_bn=False`` batch norms are
    kept as BatchNormalization nodes (TrainingMode.PRESERVE on an eval model: the exporter's
    eval peephole would otherwise fuse them into the convs)."""
    import pathlib

    import onnx
    import torch

    model, x = build_torch(name, fold_bn=fold_bn, seed=seed, **overrides)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, (x,), str(path), dynamo=True, opset_version=opset,
                              input_names=["input"], output_names=["logits"])
        else:
            training = (torch.onnx.TrainingMode.EVAL if fold_bn
                        else torch.onnx.TrainingMode.PRESERVE)
            torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=opset,
                              input_names=["input"], output_names=["logits"],
                              training=training, do_constant_folding=True)
    m = onnx.load(str(path))
    if m.ir_version > 8:
        m.ir_version = 8
        onnx.save(m, str(path))
    return path


def relax_stats(mod) -> dict:
    """Counts over ``main``: bindings, operator calls (no tuple plumbing), convolutions."""
    from tvm import relax

    func = mod["main"]
    bindings = calls = convs = 0
    kinds: dict[str, int] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            bindings += 1
            v = b.value
            op = getattr(v, "op", None)
            opname = getattr(op, "name", None)
            if opname is not None and isinstance(v, relax.Call):
                calls += 1
                kinds[opname] = kinds.get(opname, 0) + 1
                if opname.startswith("relax.nn.conv"):
                    convs += 1
    return {"bindings": bindings, "ops": calls, "convs": convs, "op_kinds": kinds}


def measure(name: str, fold_bn: bool = False) -> dict:
    """Build the Relax module and time each step; optional liveness peak via memsched."""
    import os

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    model, x = build_torch(name, fold_bn=fold_bn)
    t1 = time.perf_counter()
    ep = _export(model, x)
    t2 = time.perf_counter()
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_exported_program(ep, keep_params_as_input=False,
                                    unwrap_unit_return_tuple=True)
    t3 = time.perf_counter()
    mod = relax.transform.FoldConstant()(mod)
    t4 = time.perf_counter()
    st = relax_stats(mod)
    st.pop("op_kinds")
    out = {"name": name, "fold_bn": fold_bn,
           "params": int(sum(p.numel() for p in model.parameters())),
           "torch_build_s": round(t1 - t0, 2), "export_s": round(t2 - t1, 2),
           "from_exported_program_s": round(t3 - t2, 2), "fold_constant_s": round(t4 - t3, 2),
           "import_s": round(t4 - t1, 2), "loadavg_1min": round(load, 2), **st}
    try:  # input-order liveness peak of the activations (fp32), when memsched is importable
        import memsched

        g = memsched.from_relax(mod)
        out["peak_input_order_bytes"] = int(memsched.peak_memory(g))
    except Exception:  # noqa: BLE001 - optional number
        pass
    return out
