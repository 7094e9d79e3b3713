"""One request, one runtime description (issue 46): the options are checked once, in
`memsched.patches`, and each entry point turns their error into its own; the shared rules
(where a region starts, which blocks are squeeze-and-excitation) are the same for every
adapter."""
from __future__ import annotations

import warnings

import pytest

from memsched.patches import (MAX_REGIONS, Budget, PatchOptions, PatchOptionsError, Runtime,
                              RuntimeMemory, SOp, SpatialModel, STensor, classify_se,
                              region_starts)
from memsched.memory import MemoryModel

BAD = [dict(max_overhead=-0.1), dict(max_overhead="x"), dict(max_overhead=float("nan")),
       dict(grid="3"), dict(grid="ax2"), dict(grid=(0, 2)), dict(grid=(1, 2, 3)),
       dict(split=""), dict(region_start=-1), dict(region_start=1.5), dict(max_regions=0),
       dict(max_regions=True), dict(se_patches="both"), dict(padding="same"),
       dict(time_limit=0), dict(time_limit="soon"), dict(budget=3)]


@pytest.mark.parametrize("bad", BAD, ids=[next(iter(b)) + "=" + repr(next(iter(b.values())))
                                          for b in BAD])
def test_bad_options_raise_one_error_naming_them(bad):
    with pytest.raises(PatchOptionsError) as e:
        PatchOptions(**bad)
    assert isinstance(e.value, ValueError)
    assert next(iter(bad)) in str(e.value) and "\n" not in str(e.value)


def test_of_merges_keywords_over_options():
    base = PatchOptions(max_overhead=0.5, grid="2x3", budget=Budget(priced=7))
    got = PatchOptions.of(base, max_overhead=None, split="t", padding="margins")
    assert (got.max_overhead, got.grid, got.split, got.padding) == (0.5, (2, 3), "t", "margins")
    assert got.budget.priced == 7 and got.forced and got.regions == 1
    assert PatchOptions.of({"max_regions": 2}).regions == 2
    assert PatchOptions().regions == MAX_REGIONS
    with pytest.raises(PatchOptionsError, match="unknown patch option 'grids'"):
        PatchOptions.of(None, grids=[(2, 2)])
    with pytest.raises(PatchOptionsError):
        PatchOptions.of(42)


def test_second_region_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="max_regions"):
        assert PatchOptions.of(None, second_region=False).max_regions == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PatchOptions.of(None, max_regions=2).max_regions == 2


def test_each_entry_point_translates_the_error(tmp_path):
    from memsched.generators.tflite_synth import mobilenet_like
    from memsched.tflite.patch.tile import TileError, tile_tflite

    src = tmp_path / "m.tflite"
    src.write_bytes(mobilenet_like(quantized=True, size=32))
    with pytest.raises(TileError, match="grid"):
        tile_tflite(str(src), grid="3")
    with pytest.raises(TileError, match="padding"):
        tile_tflite(str(src), padding="wide")
    assert src.read_bytes() == mobilenet_like(quantized=True, size=32)  # left unchanged

    pytest.importorskip("tvm")
    from memsched.transform.tile_patches import TilePatches

    with pytest.raises(ValueError, match="max_regions"):
        TilePatches(max_regions=0)
    assert TilePatches(grid="2x2").options.grid == (2, 2)

    pytest.importorskip("executorch")
    from memsched.executorch import backend_config
    from memsched.executorch.patch.tile import TilePatchesError, TilePatchesPass

    with pytest.raises(TilePatchesError, match="se_patches"):
        TilePatchesPass(se_patches="both")
    # backend_config takes every option, padding and a whole PatchOptions included
    with pytest.raises(TilePatchesError, match="padding"):
        backend_config(tile_patches=True, padding="wide")
    cfg = backend_config(tile_patches=True, padding="explicit",
                         patch_options=PatchOptions(max_overhead=0.2, max_regions=2))
    (tp,) = [p for p in cfg.passes if isinstance(p, TilePatchesPass)]
    assert (tp.options.padding, tp.options.max_overhead, tp.options.max_regions) == \
        ("explicit", 0.2, 2)


def test_runtime_description_is_checked():
    mem = RuntimeMemory("m", MemoryModel())
    with pytest.raises(ValueError, match="rule"):
        Runtime(mem, implicit_padding=True)
    with pytest.raises(ValueError, match="max_concat_inputs"):
        Runtime(mem, max_concat_inputs=1)
    assert Runtime(mem, implicit_padding=True, padding_rule="same").name == "m"


def _stack(first_bytes: int, second_bytes: int) -> SpatialModel:
    """input -> eltwise (op 0) -> conv 3x3 (op 1) -> conv 3x3 (op 2), 16x16 maps."""
    ts = {0: STensor(0, "in", (1, 16, 16, 4), first_bytes // (16 * 16 * 4)),
          1: STensor(1, "q", (1, 16, 16, 4), second_bytes // (16 * 16 * 4)),
          2: STensor(2, "a", (1, 16, 16, 4), 1), 3: STensor(3, "b", (1, 16, 16, 4), 1)}
    ops = [SOp(0, "QUANTIZE", "eltwise", (0,), 1, cout=4),
           SOp(1, "CONV_2D", "window", (1,), 2, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), cout=4,
               macs_per_out=36),
           SOp(2, "CONV_2D", "window", (2,), 3, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), cout=4,
               macs_per_out=36)]
    return SpatialModel(ops, ts, [0], [3])


def test_region_start_rule_is_shared():
    # a quantize of a float input shrinks what crosses: a region may start after it (and
    # after the convolution next, whose int8 output is as small)
    assert region_starts(_stack(4096, 1024)) == [0, 1, 2]
    # the same bytes after it: no reason to run it whole
    assert region_starts(_stack(1024, 1024)) == [0]


def test_se_classifier_keeps_whole_blocks_only():
    """A mean whose vector scales the map is a block; a classifier head's mean (its vector
    reaches a model output) keeps the adapter's own class."""
    ts = {0: STensor(0, "x", (1, 8, 8, 4), 1), 1: STensor(1, "m", (1, 1, 1, 4), 4),
          2: STensor(2, "v", (1, 1, 1, 4), 4), 3: STensor(3, "y", (1, 8, 8, 4), 1),
          4: STensor(4, "h", (1, 1, 1, 4), 4)}
    ops = [SOp(0, "MEAN", "other", (0,), 1), SOp(1, "FC", "other", (1,), 2),
           SOp(2, "MUL", "eltwise", (0, 2), 3), SOp(3, "MEAN", "other", (3,), 4)]

    def reduce_of(k, op):
        return SOp(k, op.kind, "reduce", op.inputs, op.output, macs_per_out=64, cout=4,
                   divisor=64) if op.kind == "MEAN" else None

    got = list(ops)
    swapped = classify_se(got, ts, [4], [0, 16, 256, 256], reduce_of=reduce_of,
                          is_scale=lambda k: ops[k].kind == "MUL", scale_ok=lambda k, pos: True)
    assert [op.cls for op in got] == ["reduce", "vector", "scale", "other"]
    assert swapped == {2: 0} and got[2].inputs == (0, 2)
