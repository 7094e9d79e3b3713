"""memsched.report: plots and HTML reports of memory over time (analyze --plot/--report)."""
import builtins
import re
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("matplotlib")

from memsched.cli import main  # noqa: E402
from memsched.importers.load import load_graph  # noqa: E402
from memsched.memory import Problem  # noqa: E402
from memsched.report import (check_outputs, curves, html_report, inline_svg,  # noqa: E402
                             plot_memory, ReportError, tvm_binding_order, write_outputs)
from memsched.schedulers import schedule  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def solved():
    g = load_graph("example:randwire")
    s = schedule(g, "auto", "paper", time_limit=20)
    return g, s


def _ids(svg_text: str) -> set:
    root = ET.fromstring(svg_text)
    return {el.get("id") for el in root.iter() if el.get("id")}


def test_curves_match_memory_model(solved):
    g, s = solved
    lines = curves(g, "paper", s.order)
    assert [c.key for c in lines] == ["input", "tvm", "ours"]
    p = Problem.from_graph(g, "paper")
    assert lines[0].peak == p.evaluate(range(len(g))).peak
    assert lines[2].peak == s.peak
    # every importer records binding/node indices in order: TVM's order is the input order
    assert tvm_binding_order(g) == list(range(len(g)))
    assert "= input order" in lines[1].label
    xs, ys = lines[2].xy()
    assert len(xs) == len(ys) == 2 * len(g) + 1
    assert max(ys) == s.peak and ys[0] == p.initial_live()


def test_figure_has_three_lines_axes_peak_and_bound(solved):
    g, s = solved
    lines = curves(g, "paper", s.order)
    fig = plot_memory(g, lines, s.lower_bound, "t", "paper")
    ax = fig.axes[0]
    by_gid = {ln.get_gid(): ln for ln in ax.get_lines()}
    for key in ("input", "tvm", "ours"):
        assert len(by_gid[f"memsched-{key}"].get_xdata()) == 2 * len(g) + 1
    # the peak marker of ours sits on the peak op, at the peak (axis in KiB here)
    scale = 1024
    peak_mark = by_gid["memsched-peak-ours"]
    assert peak_mark.get_xdata()[0] == lines[2].peak_step + 0.5
    assert peak_mark.get_ydata()[0] * scale == s.peak
    assert max(by_gid["memsched-input"].get_ydata()) * scale == lines[0].peak
    bound = by_gid["memsched-lower-bound"]
    assert set(bound.get_ydata()) == {s.lower_bound / scale}
    assert "KiB" in ax.get_ylabel() and ax.get_xlabel()
    assert ax.get_xlim() == (0, len(g))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("memsched: peak") and f"{s.peak:,} B" in t for t in labels)
    assert any(t.startswith("lower bound") for t in labels)


@pytest.mark.parametrize("view", [[], ["--view", "file"]], ids=["relax", "file"])
def test_cli_svg_and_html(tmp_path, capsys, view):
    svg, page = tmp_path / "m.svg", tmp_path / "m.html"
    assert main(["analyze", "example:randwire", "--time-limit", "20", "--json",
                 "--plot", str(svg), "--report", str(page), *view]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert result["input_order_peak_bytes"] > result["peak_bytes"]  # else the plot shows little
    text = svg.read_text()
    ids = _ids(text)
    for gid in ("memsched-input", "memsched-tvm", "memsched-ours", "memsched-lower-bound",
                "memsched-peak-ours"):
        assert gid in ids
    root = ET.fromstring(text)
    assert any(el.get("id", "").startswith("axes_") for el in root.iter(f"{SVG}g"))
    assert "schedule position" in text and "live memory" in text  # axis labels kept as text
    # each curve is one path through every op (matplotlib may merge collinear vertices)
    for key in ("input", "tvm", "ours"):
        group = next(el for el in root.iter(f"{SVG}g") if el.get("id") == f"memsched-{key}")
        d = next(group.iter(f"{SVG}path")).get("d")
        assert result["ops"] < len(re.findall(r"[ML]", d)) <= 2 * result["ops"] + 2

    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # the page's numbers are analyze's numbers (same graph, same memory model)
    assert f"best peak <b>{result['peak_bytes']:,} B</b>" in html
    assert f"input order {result['input_order_peak_bytes']:,} B" in html
    assert f"memory model <code>{result['memory_model']}</code>" in html
    assert re.search(r"TVM(&#39;|')s order \((its frontend keeps the file(&#39;|')s order|"
                     r"Relax bindings) = input order\)", text)
    assert ("file" in view) == ("keeps the file" in text)
    legend = re.findall(r"memsched: peak [^<]*\(([\d,]+) B\)", text)
    assert legend and int(legend[0].replace(",", "")) == result["peak_bytes"]
    assert "<svg" in html and 'id="memsched-ours"' in html and "<img" not in html
    assert 'src="http' not in html and "<script" not in html  # self-contained
    methods = html[html.index('<table id="methods"'):]
    methods = methods[:methods.index("</table>")]
    for name, peak in result["methods"].items():
        assert f"<td>{name}</td><td class=\"num\">{peak:,}</td>" in methods
    sched = html[html.index('<table id="schedule"'):]
    sched = sched[:sched.index("</table>")]
    rows = re.findall(r"<tr[^>]*><td class=\"num\">(\d+)</td><td>([^<]*)</td>", sched)
    assert [r[1] for r in rows] == result["order"]
    assert sched.count('class="peak"') == 1
    in_use = [int(x.replace(",", "")) for x in
              re.findall(r"<td class=\"num\">([\d,]+)</td><td class=\"num\">[\d,]+</td></tr>",
                         sched)]
    assert max(in_use) == result["peak_bytes"]


def test_cli_png(tmp_path):
    png = tmp_path / "m.png"
    assert main(["analyze", "example:two_branch", "--time-limit", "5", "--json",
                 "--plot", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("args,msg", [
    (["--plot", "x.pdf"], "must end in .png or .svg"),
    (["--report", "x.txt"], "must end in .html"),
    (["--plot", "/no/such/dir/x.png"], "does not exist"),
])
def test_bad_paths_one_line(tmp_path, capsys, monkeypatch, args, msg):
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "example:two_branch", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_missing_matplotlib_is_one_clear_error(tmp_path, capsys, monkeypatch):
    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    with pytest.raises(ReportError, match="need matplotlib"):
        check_outputs(str(tmp_path / "a.png"), None)
    assert main(["analyze", "example:two_branch", "--report", str(tmp_path / "a.html")]) == 2
    err = capsys.readouterr().err
    assert "pip install" in err and "matplotlib" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.html").exists()


def test_html_escapes_names_and_given_tvm_order(solved):
    g, s = solved
    saved = [op.name for op in g.ops]
    for op in g.ops:  # markup for the page, mathtext for matplotlib
        op.name = "<b>&evil$^{$"
    try:
        topo = g.topological_order()
        lines = curves(g, "paper", s.order, tvm_order=topo)
        assert lines[1].order == topo
        svg = inline_svg(plot_memory(g, lines, s.lower_bound, title="m$x$.onnx"))
        assert "peak: &lt;b&gt;&amp;evil$^{$" in svg and "m$x$.onnx" in svg
        page = html_report(g, {"model": "m<x>", "methods": {}, "lower_bound": s.lower_bound},
                           lines, svg, __import__("memsched.memory", fromlist=["PAPER"]).PAPER)
        assert "<b>&evil" not in page and "&lt;b&gt;&amp;evil" in page
        assert "m&lt;x&gt;" in page
    finally:
        for op, name in zip(g.ops, saved):
            op.name = name


def test_write_outputs_returns_messages(solved, tmp_path):
    g, s = solved
    msgs = write_outputs(g, "paper", s.order, {"model": "x", "lower_bound": s.lower_bound,
                                               "methods": {"auto": s.peak}},
                         plot=str(tmp_path / "p.svg"), report=str(tmp_path / "p.html"))
    assert msgs == [f"wrote {tmp_path / 'p.svg'}", f"wrote {tmp_path / 'p.html'}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.html", "p.svg"]  # no temp files
