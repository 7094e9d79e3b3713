"""``memsched pack``: CSV in, arena / bound / offsets out; bad CSV is one line, exit 2."""
import json
import os

import pytest

from memsched.cli import main

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "benchmarks", "minimalloc")


def _overlap_free(rows, offsets) -> bool:
    for i, (_, lo1, up1, s1) in enumerate(rows):
        for j, (_, lo2, up2, s2) in enumerate(rows[:i]):
            if lo1 < up2 and lo2 < up1 and offsets[i] < offsets[j] + s2 and \
                    offsets[j] < offsets[i] + s1:
                return False
    return True


def test_pack_small_csv_json_and_output(tmp_path, capsys):
    rows = [("a", 0, 4, 100), ("b", 2, 6, 50), ("c", 4, 8, 100), ("d", 0, 8, 10)]
    f = tmp_path / "x.csv"
    f.write_text("id,lower,upper,size\n" + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]}\n"
                                                   for r in rows))
    out = tmp_path / "o.csv"
    assert main(["pack", str(f), "--json", "-o", str(out)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["arena"] == r["lower_bound"] == r["live_peak"] == 160 and r["optimal"]
    assert _overlap_free(rows, r["offsets"]) and max(
        o + s for o, (_, _, _, s) in zip(r["offsets"], rows)) == r["arena"]
    assert out.read_text().splitlines()[0] == "id,lower,upper,size,offset"
    # a capacity below the liveness peak cannot be met: exit 1, fits false
    assert main(["pack", str(f), "--capacity", "159", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["fits"] is False


def test_pack_bad_input_is_one_line(tmp_path, capsys):
    cases = {"neg.csv": "id,lower,upper,size\na,0,4,-1\n",
             "order.csv": "id,lower,upper,size\na,4,4,10\n",
             "cols.csv": "id,lower,size\na,0,10\n",
             "text.csv": "id,lower,upper,size\na,0,x,10\n",
             "bin.csv": "\0\1\2garbage"}
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        assert main(["pack", str(p)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:"), (name, err)
    assert main(["pack", str(tmp_path / "missing.csv")]) == 2
    assert main(["pack", str(tmp_path / "neg.csv"), "--alignment", "0"]) == 2
    capsys.readouterr()


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="MiniMalloc instances not present")
def test_pack_a_challenging_instance_fits(capsys):
    path = os.path.join(SHARED, "C.1048576.csv")
    assert main(["pack", path, "--capacity", "1MiB", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["fits"] and r["arena"] <= 1 << 20
