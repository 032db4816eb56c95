#!/usr/bin/env python3
"""Markdown tables of a `tests/bench/run.sh --fleet` run.

Usage: fleet-report.py OUT_DIR COMMAND VCPUS KEY=LABEL... [--skip KEY=REASON]...

OUT_DIR holds v<N>/fleet/ per vCPU count (tests/bench/fleet-guest.sh's
/out) and v<N>/host.txt. Each cell is the median over rounds with the
range (min-max) when there was more than one round.
"""
import json
import statistics
import sys
from pathlib import Path


def kv(path):
    """key=value pairs, several to a line; status= and stderr= take the
    rest of their line (repeated stderr= lines are joined)."""
    out = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        toks = [line] if line.startswith(("status=", "stderr=")) else line.split()
        for tok in toks:
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = out[k] + " | " + v if k == "stderr" and k in out else v
    return out


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def spread(vals, fmt="{:.1f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    med = fmt.format(statistics.median(vals))
    if len(vals) == 1:
        return med
    return f"{med} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def phases(path):
    """Per-sample pass wall/CPU and cgroups-phase wall (ms) of a window."""
    out = {"pass_wall": [], "pass_cpu": [], "cgroups_wall": []}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("pass"):
            out["pass_wall"].append(r["pass"]["wall_ms"])
            out["pass_cpu"].append(r["pass"]["cpu_ms"])
        if r.get("cgroups"):
            out["cgroups_wall"].append(r["cgroups"]["wall_ms"])
    return out


def mean(v):
    return statistics.fmean(v) if v else None


def main():
    args = sys.argv[1:]
    out_dir, command, vcpus = Path(args[0]), args[1], [int(v) for v in args[2].split(",")]
    labels, skips = {}, {}
    rest = args[3:]
    i = 0
    while i < len(rest):
        if rest[i] == "--skip":
            k, why = rest[i + 1].split("=", 1)
            skips[k] = why
            i += 2
            continue
        k, label = rest[i].split("=", 1)
        labels[k] = label
        i += 1

    problems = []
    print(f"Reproduce: `{command}`\n")
    setups, cells = {}, {}
    for n in vcpus:
        d = out_dir / f"v{n}" / "fleet"
        setups[n] = {**kv(d / "setup.txt"), **kv(out_dir / f"v{n}" / "host.txt")}
        for r in sorted(d.glob("r*-*")) if d.exists() else []:
            rnd, key = r.name[1:].split("-", 1)
            rec = kv(r / "rec.txt")
            c = {**kv(r / "probe.txt"), **kv(r / "work.txt"), **rec}
            c.update(phases(r / "phases.jsonl"))
            cells.setdefault((n, key), {})[int(rnd)] = c

    print("### Setup (TCG, one QEMU thread for all vCPUs)\n")
    print("| vCPUs | boot s | tree s | processes s | cgroups | processes | tasks | guest MiB used | churn cycles (slowest ms) | whole VM s |")
    print("| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
    for n in vcpus:
        s = setups[n]
        print(f"| {n} | {s.get('boot_s', '–')} | {s.get('tree_s', '–')} | {s.get('procs_s', '–')} "
              f"| {s.get('cgroups', '–')} | {s.get('processes', '–')} | {s.get('tasks', '–')} "
              f"| {s.get('mem_used_mib', '–')} | {s.get('churn_cycles', '–')} ({s.get('churn_max_ms', '–')}) "
              f"| {s.get('host_s', '–')} |")
    print()

    for n in vcpus:
        print(f"### {n} vCPUs: the workload's view\n")
        print("Prober: mkdir, attach, detach, rmdir every 10 ms, ms per cycle. Throughput: ops/s of "
              "the workers, and per round against that round's no-recorder run. Recorder CPU: its "
              "cgroup's usage_usec over both windows / samples written. Pass: ours' BPF pass per "
              "sample (--phase-times), mean (slowest).\n")
        print("| recorder | prober p50 ms | prober p99 ms | prober max ms | missed ticks "
              "| throughput ops/s | vs none | recorder CPU ms/sample | samples | pass wall ms | pass CPU ms |")
        print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
        base = cells.get((n, "none"), {})
        for key, label in labels.items():
            if key in skips:
                print(f"| {label} | skipped: {skips[key]} |||||||||| ")
                continue
            rounds = cells.get((n, key), {})
            bad = [c.get("status") for c in rounds.values() if not c.get("status", "").startswith("ok")]
            problems += [f"{n} vCPUs, {key}: {b}" for b in bad] or ([] if rounds else [f"{n} vCPUs, {key}: no results"])
            if not rounds or len(bad) == len(rounds):
                why = bad[0] if bad else "no results"
                print(f"| {label} | {why} |||||||||| ")
                continue
            ok = {r: c for r, c in rounds.items() if c.get("status", "").startswith("ok")}
            for r, c in ok.items():
                if not num(c.get("cycles")) or not num(c.get("ops_s")):
                    problems.append(f"{n} vCPUs, {key}, round {r}: no prober cycles or no throughput")
                if key != "none" and not num(c.get("samples")):
                    problems.append(f"{n} vCPUs, {key}, round {r}: no samples in the window")
                if key == "bpf" and not c["pass_wall"]:
                    problems.append(f"{n} vCPUs, {key}, round {r}: no BPF pass in --phase-times")
            col = lambda k: [num(c.get(k)) for c in ok.values()]
            ratio = [num(c.get("ops_s")) / num(base[r]["ops_s"]) for r, c in ok.items()
                     if r in base and num(base[r].get("ops_s")) and num(c.get("ops_s"))]
            cpu = [num(c["cpu_usec"]) / 1e3 / num(c["samples"]) for c in ok.values()
                   if num(c.get("samples")) and num(c.get("cpu_usec")) is not None]
            samples = [num(c.get("samples")) for c in ok.values()]
            pw = [mean(c["pass_wall"]) for c in ok.values()]
            pmax = max((max(c["pass_wall"]) for c in ok.values() if c["pass_wall"]), default=None)
            pc = [mean(c["pass_cpu"]) for c in ok.values()]
            pass_wall = spread(pw, "{:.2f}")
            if pmax is not None:
                pass_wall += f" ({pmax:.1f})"
            note = f" ({len(bad)} round(s) failed: {bad[0]})" if bad else ""
            print(f"| {label}{note} | {spread(col('p50_ms'), '{:.2f}')} | {spread(col('p99_ms'))} "
                  f"| {spread(col('max_ms'))} | {spread(col('missed_ticks'), '{:.0f}')} "
                  f"| {spread(col('ops_s'), '{:.0f}')} | {spread(ratio, '{:.3f}') if key != 'none' else '1'} "
                  f"| {spread(cpu, '{:.1f}') if key != 'none' else '–'} "
                  f"| {spread(samples, '{:.0f}') if key != 'none' else '–'} | {pass_wall} | {spread(pc, '{:.2f}')} |")
        print()

    print("### The recorder's view: CPU per sample (its cgroup's usage_usec / samples), ms\n")
    keys = [k for k in labels if k != "none"]
    print("| vCPUs | " + " | ".join(labels[k] for k in keys) + " | ours BPF: pass wall | pass CPU | ours BPF / below 0.9 |")
    print("| --: | " + " | ".join("--:" for _ in keys) + " | --: | --: | --: |")
    for n in vcpus:
        row, per = [], {}
        for k in keys:
            ok = [c for c in cells.get((n, k), {}).values() if c.get("status", "").startswith("ok")]
            cpu = [num(c["cpu_usec"]) / 1e3 / num(c["samples"]) for c in ok
                   if num(c.get("samples")) and num(c.get("cpu_usec")) is not None]
            per[k] = statistics.median(cpu) if cpu else None
            row.append(spread(cpu) if k not in skips else "skipped")
        ok = [c for c in cells.get((n, "bpf"), {}).values() if c.get("status", "").startswith("ok")]
        pw = spread([mean(c["pass_wall"]) for c in ok], "{:.2f}")
        pc = spread([mean(c["pass_cpu"]) for c in ok], "{:.2f}")
        rel = f"{per['bpf'] / per['below09']:.3f}" if per.get("bpf") and per.get("below09") else "–"
        print(f"| {n} | " + " | ".join(row) + f" | {pw} | {pc} | {rel} |")
    print()
    for p in problems:
        print(f"[bench] fleet: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
