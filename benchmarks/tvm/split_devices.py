"""GenEFlow split across 2 / 4 / 6 devices on zoo CNNs: predicted latency of single device,
uniform, greedy and GA under memory limits that force splitting, and a measured 2-device run on
local TVM RPC servers.

    .venv/bin/python -m benchmarks.tvm.split_devices [--models resnet,densenet,darts,randwire]
        [--devices 2,4,6] [--fractions 0.5,0.25] [--no-rpc] [--json out.json]

For every model: two local RPC servers are started (``TVM_NUM_THREADS=1`` each: one core per
device; this machine has 2 cores, so measured runs use 2 devices and 4 / 6 devices are
*predicted* with the calibrated model of these servers); the link (latency, bandwidths, call
cost) and device speeds are measured over RPC (`memsched.runtime.split_profile`), every
operator kernel of the model is built and timed on a server (linearity checked on a sample),
then for each device count ``n`` and memory fraction ``f`` every device gets ``f`` x the
single-device peak (weights + activations, the split evaluator's model) and the four methods
run (GA: pymoo, seed 0, population 40, at most 150 generations, stop after 40 without
improvement, seeded with the baselines, then one polish sweep). With two devices, half the peak
cannot hold the weights plus any activation when weights dominate, so the limits are 0.6 and
0.3 of the peak (0.3 forces at least 4 devices). ``single`` is the single-device latency
when the model fits one device, else ``-`` (the best single-device latency ignoring memory is
in the header of each model). For n = 2 the GA's split is rewritten (`SplitAcrossDevices`),
built, uploaded and run on the two servers: measured latency (median of 5), prediction error,
outputs equal to the unsplit model.

Models are reduced variants of the zoo networks (smaller input / fewer cells) so that one run
finishes in minutes on 2 shared cores; they are labelled in the table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

MODELS = {
    # name: (zoo network, overrides, label)
    "resnet": ("resnet-50", {"image_size": 96}, "ResNet-50 @96x96"),
    "densenet": ("densenet-121", {"image_size": 64}, "DenseNet-121 @64x64"),
    "darts": ("darts-v2-cifar", {"c": 16, "layers": 8}, "DARTS-V2 CIFAR C=16, 8 cells"),
    "randwire": ("randwire-ws-1", {"image_size": 112, "n": 16, "c": 32},
                 "RandWire-WS(1) @112, 16 nodes/stage, C=32"),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_model(key: str):
    from benchmarks.zoo import build_torch, relax_from_torch

    name, kw, label = MODELS[key]
    model, x = build_torch(name, fold_bn=True, **kw)
    return relax_from_torch(model, x), x.numpy(), label


def run_reference(mod, x):
    import tvm
    from tvm import relax

    ex = tvm.compile(mod, target="llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return out.numpy()


def op_times(mod, prob, session, cache_path):
    from memsched.runtime.split_profile import measure_op_times
    from memsched.split.cost import OpTimes

    if cache_path and os.path.exists(cache_path):
        with open(cache_path) as f:
            data = json.load(f)
        if data.get("ops") == prob.n:
            log(f"operator times from {cache_path}")
            return OpTimes.from_json(data["times"])
    t0 = time.perf_counter()
    times = measure_op_times(mod, prob, session, progress=log)
    log(f"measured {getattr(times, 'kernels', '?')} kernels in {time.perf_counter() - t0:.0f} s")
    if cache_path:
        with open(cache_path, "w") as f:
            json.dump({"ops": prob.n, "times": times.to_json()}, f)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--devices", default="2,4,6")
    ap.add_argument("--fractions", default="0.6,0.3")
    ap.add_argument("--no-rpc", action="store_true", help="skip the measured 2-device runs")
    ap.add_argument("--n-gen", type=int, default=150)
    ap.add_argument("--pop-size", type=int, default=40)
    ap.add_argument("--cache",
                    default=os.environ.get("MEMSCHED_SPLIT_CACHE", "/tmp/memsched_split"),
                    help="directory for measured operator times (reused across runs)")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--compete", type=int, default=0,
                    help="run N CPU-bound busy loops meanwhile (how calibration and prediction "
                         "degrade under load)")
    args = ap.parse_args()

    import memsched  # noqa: F401

    os.makedirs(args.cache, exist_ok=True)
    devices_list = [int(v) for v in args.devices.split(",")]
    fractions = [float(v) for v in args.fractions.split(",")]
    rows, results = [], []
    import subprocess

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.compete)]
    try:
        _run(args, devices_list, fractions, rows, results)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "models": results, "compete": args.compete}, f, indent=1)


def _run(args, devices_list, fractions, rows, results) -> None:
    from memsched.runtime.rpc_servers import ServerPool
    from memsched.runtime.rpc_split import build_device_libs, run_split
    from memsched.runtime.split_profile import (prediction_spread, profile_devices,
                                                with_link_spread, with_prediction_spread)
    from memsched.split import CostModel, Device, Encoding, compare, evaluate
    from memsched.transform.split_relax import from_relax
    from memsched.transform.split_across_devices import split_module

    with ServerPool(local=2) as pool:
        sessions = pool.sessions()
        devs, link, extra = profile_devices(sessions)
        log(f"link: latency {link.latency * 1e3:.3f} ms, up {link.bandwidth / 1e6:.1f} MB/s, "
            f"down {link.bandwidth_down / 1e6:.1f} MB/s, call {link.call_overhead * 1e3:.3f} ms;"
            f" speeds {[round(d.speed, 3) for d in devs]}; copy "
            f"{extra['copy_bandwidth'] / 1e9:.2f} GB/s")
        speed = float(np.mean([d.speed for d in devs]))
        for key in args.models.split(","):
            t0 = time.perf_counter()
            mod, x, label = build_model(key)
            prob = from_relax(mod, time_limit=30)
            log(f"{label}: {prob.n} operators, imported and scheduled in "
                f"{time.perf_counter() - t0:.0f} s")
            times = op_times(mod, prob, sessions[0], os.path.join(args.cache, f"{key}.json"))
            if getattr(times, "calibration", None):
                times.calibration = with_link_spread(times.calibration, extra["link_spread"])
            one = CostModel([Device(None, 1.0)], link, times,
                            copy_bandwidth=extra["copy_bandwidth"])
            enc1 = Encoding(prob, 1)
            ev1 = evaluate(enc1, one, enc1.single())
            peak1, lat1 = int(ev1.peak[0, 0]), float(ev1.latency[0])
            ref = None
            log(f"{label}: single-device peak {peak1 / 2**20:.2f} MiB "
                f"(weights {prob.weight_bytes / 2**20:.2f} MiB), latency {lat1 * 1e3:.1f} ms; "
                f"linearity {times.linearity}")
            for n in devices_list:
                for frac in fractions:
                    mem = int(peak1 * frac)
                    cost = CostModel([Device(mem, speed if n > 2 else devs[k % 2].speed)
                                      for k in range(n)], link, times,
                                     copy_bandwidth=extra["copy_bandwidth"])
                    res = compare(prob, cost, seed=0, n_gen=args.n_gen, pop_size=args.pop_size,
                                  patience=40)
                    lat = {m: (r.latency if r.feasible else None) for m, r in res.items()}
                    ga = res["ga"]
                    cal = getattr(times, "calibration", None) or {}
                    if cal and ga.feasible:
                        cal = with_prediction_spread(cal, prediction_spread(ga, cost,
                                                                            extra["links"]))
                    row = {"model": label, "key": key, "devices": n, "fraction": frac,
                           "calibration": cal,
                           "memory_bytes": mem, "peak1_bytes": peak1, "single_nomem_s": lat1,
                           "latency_s": lat,
                           "latency_any_s": {m: r.latency for m, r in res.items()},
                           "feasible": {m: r.feasible for m, r in res.items()},
                           "ga_seconds": ga.seconds, "ga_generations": ga.stats.get("generations"),
                           "ga_peaks": ga.evaluation.row(0)["per_device_peak_bytes"]}
                    log(f"  n={n} f={frac}: " + ", ".join(
                        f"{m} {v * 1e3:.1f} ms" if v is not None else f"{m} -"
                        for m, v in lat.items()) + f" (GA {ga.seconds:.0f} s)")
                    if n == 2 and not args.no_rpc and ga.feasible:
                        if ref is None:
                            ref = run_reference(mod, x)
                        new, _ = split_module(mod, cost.devices, link, problem=prob, result=ga)
                        t1 = time.perf_counter()
                        libs = build_device_libs(new, 2)
                        log(f"  built 2 device libraries in {time.perf_counter() - t1:.0f} s")
                        rep = run_split(new, [x], sessions, repeat=5, warmup=1, libs=libs)
                        out = rep["outputs"][0]
                        row["rpc"] = {"measured_s": rep["measured_s"], "predicted_s": ga.latency,
                                      "error": (rep["measured_s"] - ga.latency) / ga.latency,
                                      "outputs_equal": bool(np.allclose(out, ref, rtol=1e-4,
                                                                        atol=1e-5)),
                                      "max_abs_diff": float(np.abs(out - ref).max()),
                                      "bytes_moved": rep["bytes_up"] + rep["bytes_down"],
                                      "runs_s": rep["runs_s"]}
                        log(f"  RPC: measured {rep['measured_s'] * 1e3:.1f} ms vs predicted "
                            f"{ga.latency * 1e3:.1f} ms ({row['rpc']['error'] * 100:+.1f}%), "
                            f"equal {row['rpc']['outputs_equal']}")
                    rows.append(row)
            results.append({"model": label, "ops": prob.n, "peak1_bytes": peak1,
                            "single_nomem_s": lat1, "linearity": times.linearity,
                            "link": link.__dict__})


def print_table(rows) -> None:
    def ms(v):
        return "-" if v is None else f"{v * 1e3:.1f}"

    print("| model | n | mem/dev | single | uniform | greedy | GA | GA vs best single | "
          "GA s | RPC measured (pred. err) | calibration spread: kernels (time-weighted) / "
          "prediction between link calibrations | equal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["latency_s"]
        ga = lat["ga"]
        gain = f"{(ga - r['single_nomem_s']) / r['single_nomem_s'] * 100:+.1f}%" \
            if ga is not None else "-"
        rpc = r.get("rpc")
        meas = (f"{rpc['measured_s'] * 1e3:.1f} ({rpc['error'] * 100:+.1f}%)" if rpc else
                ("-" if r["devices"] == 2 else "predicted only"))
        eq = ("yes" if rpc["outputs_equal"] else "NO") if rpc else "-"
        print(f"| {r['model']} | {r['devices']} | {r['fraction']:g} x peak | "
              f"{ms(lat['single'])} | {ms(lat['uniform'])} | {ms(lat['greedy'])} | {ms(ga)} | "
              f"{gain} | {r['ga_seconds']:.0f} | {meas} | {_spread(r)} | {eq} |")


def _spread(r) -> str:
    cal = r.get("calibration") or {}
    if cal.get("spread_weighted") is None:
        return "cached"
    pred = cal.get("prediction_spread")
    return (f"{100 * cal['spread_weighted']:.0f} % / "
            f"{'-' if pred is None else f'{100 * pred:.0f} %'}"
            f"{'' if cal['trusted'] else ' (not trusted)'}")


if __name__ == "__main__":
    main()
