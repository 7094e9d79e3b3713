"""Reports and plots of memory over time:
``memsched analyze MODEL --plot out.svg --report out.html``.

Three schedules of one graph under one memory model (`memsched.memory`):

* **input order**: the model file's operator order (ONNX nodes, TFLite operators, the Relax
  bindings of a ``.pt2`` or an example);
* **TVM's order**: the order TVM's planner (StaticPlanBlockMemory) sees, the order of the Relax
  bindings. TVM's frontends emit the bindings in the file's order (the ONNX frontend converts
  ``graph.node`` in order, the TFLite frontend its operators in order, the torch frontend the FX
  nodes in order) and the default CPU pipeline reorders nothing, so for every model memsched
  reads this is the input order; the plot says so in its legend when the two coincide. A caller
  with another binding order (e.g. after ``relax.transform.TopologicalSort``) passes it as
  ``tvm_order``;
* **ours**: the schedule memsched found.

The curve of an order alternates, for op ``k`` at x = k .. k+1, between the bytes live before
the op (x = k), the bytes in use while it runs (x = k + 0.5: live + its outputs + workspace,
the footprint whose maximum is the peak) and the bytes live after it (x = k + 1). The peak op
of each order is marked; the proven lower bound is a horizontal line.

matplotlib is an optional dependency (``pip install tvm-memsched[plot]``); without it
`check_outputs` raises a one-line `ReportError` before any work. Figures are built with
``matplotlib.figure.Figure`` (no pyplot, no global state); every line carries a gid
(``memsched-input``, ``memsched-tvm``, ``memsched-ours``, ``memsched-lower-bound``,
``memsched-peak-*``) that the SVG keeps as the id of its group.
"""
from __future__ import annotations

import base64
import html
import io
import os
from dataclasses import dataclass
from typing import Sequence

from .errors import CLIError
from .fileio import write_atomic
from .graph import OpGraph
from .memory import MemoryModel, Problem, Profile

PLOT_FORMATS = (".png", ".svg")
COLORS = {"input": "#7f7f7f", "tvm": "#d62728", "ours": "#1f77b4"}
STYLES = {"input": "-", "tvm": "--", "ours": "-"}


class ReportError(CLIError):
    """A bad ``--plot``/``--report`` path, or matplotlib missing (one line, exit status 2)."""


def _matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise ReportError("--plot/--report need matplotlib: pip install 'tvm-memsched[plot]' "
                          "(or pip install matplotlib)") from None
    return matplotlib


def _check_path(path: str, option: str, exts: Sequence[str]) -> None:
    if not path or path.endswith(os.sep):
        raise ReportError(f"bad {option} {path!r}: not a file name")
    ext = os.path.splitext(path)[1].lower()
    if ext not in exts:
        raise ReportError(f"bad {option} {path!r}: the name must end in "
                          f"{' or '.join(exts)}")
    if os.path.isdir(path):
        raise ReportError(f"cannot write {path!r}: it is a directory")
    out_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(out_dir):
        raise ReportError(f"cannot write {path!r}: directory {out_dir!r} does not exist")
    if not os.access(out_dir, os.W_OK) or (os.path.exists(path) and
                                           not os.access(path, os.W_OK)):
        raise ReportError(f"cannot write {path!r}: permission denied")


def check_outputs(plot: str | None, report: str | None) -> None:
    """Check ``--plot``/``--report`` before any work: file names, directories, matplotlib."""
    if plot is not None:
        _check_path(plot, "--plot", PLOT_FORMATS)
    if report is not None:
        _check_path(report, "--report", (".html", ".htm"))
    if plot is not None or report is not None:
        _matplotlib()


# ---------------------------------------------------------------------------- curves
@dataclass
class Curve:
    """One order's memory over time."""

    key: str  # input | tvm | ours
    label: str
    order: list[int]
    profile: Profile

    @property
    def peak(self) -> int:
        return self.profile.peak

    @property
    def peak_step(self) -> int:
        return self.profile.peak_step

    def xy(self) -> tuple[list[float], list[int]]:
        """Points of the curve: live before op k at x = k, in use while it runs at k + 0.5."""
        p = self.profile
        xs: list[float] = [0.0]
        ys: list[int] = [p.lives[0]]
        for k, foot in enumerate(p.steps):
            xs += [k + 0.5, k + 1.0]
            ys += [foot, p.lives[k + 1]]
        return xs, ys


def tvm_binding_order(graph: OpGraph) -> list[int]:
    """The Relax binding order of ``graph``'s ops: by `Op.source` (the binding or node index
    every importer records), which TVM's frontends follow; the input order when unknown."""
    n = len(graph.ops)
    sources = [op.source for op in graph.ops]
    if all(isinstance(s, int) for s in sources) and len(set(sources)) == n:
        order = sorted(range(n), key=sources.__getitem__)
        if graph.is_topological(order):
            return order
    return list(range(n))


def curves(graph: OpGraph, model: MemoryModel | str | None, ours: Sequence[int],
           tvm_order: Sequence[int] | None = None, file_graph: bool = False) -> list[Curve]:
    """The input order, TVM's order and ``ours`` evaluated under ``model``. ``file_graph``:
    ``graph`` is the model file's own graph (analyze ``--view file``), not Relax bindings; TVM's
    order is then the file order its frontend follows."""
    problem = Problem.from_graph(graph, MemoryModel.get(model))
    graph.check_order(ours)
    inp = list(range(len(graph.ops)))
    tvm = list(tvm_order) if tvm_order is not None else tvm_binding_order(graph)
    graph.check_order(tvm)
    same = tvm == inp
    out = [Curve("input", "input order", inp, problem.evaluate(inp)),
           Curve("tvm", ("TVM's order (its frontend keeps the file's order" if file_graph
                         else "TVM's order (Relax bindings") + (" = input order)" if same else ")"),
                 tvm, problem.evaluate(tvm)),
           Curve("ours", "memsched" + (" (= input order)" if list(ours) == inp else ""),
                 list(ours), problem.evaluate(list(ours)))]
    return out


def _plain(text: str) -> str:
    """User text (model path, op names) for matplotlib: a ``$`` would start mathtext."""
    return str(text).replace("$", r"\$")


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


# ---------------------------------------------------------------------------- plot
def plot_memory(graph: OpGraph, lines: list[Curve], lower_bound: int | None,
                title: str | None = None, memory_model: str = ""):
    """A matplotlib `Figure`: the curves, each order's peak op marked, the lower bound."""
    _matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 5.4), layout="constrained")
    ax = fig.add_subplot()
    n = len(graph.ops)
    top = max([c.peak for c in lines] + [lower_bound or 0, 1])
    unit, scale = next(((u, s) for u, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
                        if top >= 2 * s), ("B", 1))
    for c in lines:
        xs, ys = c.xy()
        ax.plot(xs, [y / scale for y in ys], STYLES.get(c.key, "-"), color=COLORS.get(c.key),
                gid=f"memsched-{c.key}", linewidth=1.6 if c.key == "ours" else 1.2,
                label=f"{c.label}: peak {human_bytes(c.peak)} ({c.peak:,} B)")
    for c in lines:
        k = c.peak_step
        if k < 0:
            continue
        marker, size = {"input": ("s", 9), "tvm": ("v", 7)}.get(c.key, ("o", 8))
        ax.plot([k + 0.5], [c.peak / scale], marker=marker, linestyle="none", markersize=size,
                color=COLORS.get(c.key), gid=f"memsched-peak-{c.key}")
        ours_order = next((o.order for o in lines if o.key == "ours"), None)
        if c.key == "ours" or (c.key == "input" and c.order != ours_order):
            name = graph.ops[c.order[k]].name
            ax.annotate(f"peak: {_plain(name[:40])}", (k + 0.5, c.peak / scale),
                        textcoords="offset points", xytext=(6, 6 if c.key == "ours" else -14),
                        fontsize=8, color=COLORS.get(c.key), gid=f"memsched-peak-label-{c.key}")
    if lower_bound is not None and lower_bound > 0:
        ax.axhline(lower_bound / scale, color="#2ca02c", linestyle=":", linewidth=1.4,
                   gid="memsched-lower-bound",
                   label=f"lower bound {human_bytes(lower_bound)} ({lower_bound:,} B)")
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(0, top / scale * 1.08)
    ax.set_xlabel("schedule position (op k runs from k to k+1)")
    ax.set_ylabel(f"live memory ({unit})" +
                  (f", memory model {memory_model!r}" if memory_model else ""))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    ax.set_title(_plain(title or f"{graph.name}: {n} ops"), fontsize=10)
    return fig


def _render(fig, fmt: str) -> bytes:
    import matplotlib

    buf = io.BytesIO()
    rc = {"svg.fonttype": "none", "svg.hashsalt": "memsched"}  # text as text, stable ids
    with matplotlib.rc_context(rc):
        if fmt == "svg":
            fig.savefig(buf, format="svg", metadata={"Date": None})
        else:
            fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
    return buf.getvalue()


def save_plot(fig, path: str) -> None:
    """Write the figure as PNG or SVG (by the file name), atomically."""
    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    if "." + fmt not in PLOT_FORMATS:
        raise ReportError(f"bad --plot {path!r}: the name must end in .png or .svg")
    write_atomic(path, _render(fig, fmt))


def inline_svg(fig) -> str:
    """The figure as an ``<svg>`` element for an HTML page (no XML prolog or DOCTYPE)."""
    text = _render(fig, "svg").decode("utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def png_data_uri(fig) -> str:
    return "data:image/png;base64," + base64.b64encode(_render(fig, "png")).decode("ascii")


# ---------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;font-size:0.9em}
th,td{border:1px solid #ccc;padding:3px 8px} th{background:#f0f0f0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.peak td{background:#ffe9a8;font-weight:bold}
.note{color:#555;font-size:0.9em;max-width:60em}
.plot svg{max-width:100%;height:auto}
"""


def html_report(graph: OpGraph, result: dict, lines: list[Curve], figure_svg: str,
                model: MemoryModel) -> str:
    """One self-contained HTML page: summary, methods table, plot (inline SVG), schedule."""
    e = html.escape
    n = len(graph.ops)
    ours = next(c for c in lines if c.key == "ours")
    inp = next(c for c in lines if c.key == "input")
    input_peak = inp.peak
    pos_in_input = {v: k for k, v in enumerate(inp.order)}
    lb = result.get("lower_bound")
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>memsched report: {e(str(result.get('model', graph.name)))}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>memsched report: {e(str(result.get('model', graph.name)))}</h1>"]
    status = ("optimal (peak = lower bound)" if result.get("optimal") else
              f"not proven optimal (lower bound {lb:,} B)" if lb is not None else "")
    out.append("<p>" + ", ".join([
        f"{n} ops", f"memory model <code>{e(model.name)}</code>",
        f"algorithm <code>{e(str(result.get('algorithm', '')))}</code>",
        f"best peak <b>{ours.peak:,} B</b> ({human_bytes(ours.peak)})",
        f"input order {input_peak:,} B",
        f"lower bound {lb:,} B" if lb is not None else "no lower bound",
        status] + ([f"{result['seconds']} s"] if "seconds" in result else [])) + "</p>")

    out.append("<h2>Methods</h2><table id=\"methods\"><thead><tr><th>method</th>"
               "<th>peak (bytes)</th><th>vs input order</th></tr></thead><tbody>")
    for name, peak in (result.get("methods") or {}).items():
        rel = f"{100.0 * (peak - input_peak) / input_peak:+.1f}%" if input_peak else "-"
        out.append(f"<tr><td>{e(str(name))}</td><td class=\"num\">{peak:,}</td>"
                   f"<td class=\"num\">{rel}</td></tr>")
    for c in [c for c in lines if c.key == "tvm"]:  # input and ours are rows above
        out.append(f"<tr><td>{e(c.label)}</td><td class=\"num\">{c.peak:,}</td><td class=\"num\">"
                   + (f"{100.0 * (c.peak - input_peak) / input_peak:+.1f}%" if input_peak
                      else "-") + "</td></tr>")
    if lb is not None:
        out.append(f"<tr><td>lower bound</td><td class=\"num\">{lb:,}</td><td></td></tr>")
    out.append("</tbody></table>")

    out.append("<h2>Memory over time</h2><div class=\"plot\">" + figure_svg + "</div>")
    out.append("<p class=\"note\">For op k the curve goes from the bytes live before it "
               "(x = k) to the bytes in use while it runs (x = k + 0.5: live tensors, its "
               "outputs and workspace; the peak is the largest of these) to the bytes live "
               "after it (x = k + 1). TVM's order is the order of the Relax bindings, which "
               "TVM's frontends emit in the model file's order and TVM's planner follows.</p>")

    out.append("<h2>Schedule (memsched)</h2><table id=\"schedule\"><thead><tr><th>step</th>"
               "<th>op</th><th>kind</th><th>input position</th><th>outputs (bytes)</th>"
               "<th>in use while running (bytes)</th><th>live after (bytes)</th></tr>"
               "</thead><tbody>")
    p = ours.profile
    for k, v in enumerate(ours.order):
        op = graph.ops[v]
        outb = sum(graph.tensors[t].nbytes for t in op.outputs)
        cls = " class=\"peak\"" if k == ours.peak_step else ""
        out.append(f"<tr{cls}><td class=\"num\">{k}</td><td>{e(op.name)}</td>"
                   f"<td>{e(op.kind)}</td><td class=\"num\">{pos_in_input[v]}</td>"
                   f"<td class=\"num\">{outb:,}</td><td class=\"num\">{p.steps[k]:,}</td>"
                   f"<td class=\"num\">{p.lives[k + 1]:,}</td></tr>")
    out.append("</tbody></table>")
    out.append("<p class=\"note\">Written by memsched. Live bytes follow the memory model "
               f"<code>{e(model.name)}</code> (memsched/memory.py).</p></body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- entry point
def write_outputs(graph: OpGraph, model: MemoryModel | str | None, ours: Sequence[int],
                  result: dict, plot: str | None = None, report: str | None = None,
                  tvm_order: Sequence[int] | None = None) -> list[str]:
    """Write ``plot`` (.png/.svg) and/or ``report`` (.html) for ``analyze``'s ``result``.
    Returns one message per file written."""
    check_outputs(plot, report)
    model = MemoryModel.get(model)
    lines = curves(graph, model, ours, tvm_order, file_graph=result.get("view") == "file")
    title = f"{result.get('model', graph.name)}: {len(graph.ops)} ops"
    fig = plot_memory(graph, lines, result.get("lower_bound"), title, model.name)
    done = []
    if plot is not None:
        save_plot(fig, plot)
        done.append(f"wrote {plot}")
    if report is not None:
        page = html_report(graph, result, lines, inline_svg(fig), model)
        write_atomic(report, page.encode("utf-8"))
        done.append(f"wrote {report}")
    return done
