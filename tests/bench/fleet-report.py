#!/usr/bin/env python3
"""Markdown tables of a `tests/bench/run.sh --fleet` run.

Usage: fleet-report.py OUT_DIR COMMAND VCPUS KEY=LABEL... [--skip KEY=REASON]... [--native]

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


def phases(path=None):
    """Per-sample pass wall/CPU, cgroups-phase and process-phase wall (ms)
    of a window."""
    out = {"pass_wall": [], "pass_cpu": [], "cgroups_wall": [], "procs_wall": []}
    if path is None or not path.exists():
        return out
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("pass"):
            out["pass_wall"].append(r["pass"]["wall_ms"])
            out["pass_cpu"].append(r["pass"]["cpu_ms"])
        if r.get("cgroups"):
            out["cgroups_wall"].append(r["cgroups"]["wall_ms"])
        if r.get("procs"):
            out["procs_wall"].append(r["procs"]["wall_ms"])
    return out


def lockwaits(rounds_dir):
    """cgroup-lock-wait's lines over a recorder's rounds: per (lock,
    holder) waits and total ms summed, max ms the largest; None when no
    round has a file; "mutex" says whether cgroup_mutex was told apart."""
    files = [r / "lockwait.txt" for r in rounds_dir if (r / "lockwait.txt").exists()]
    if not files:
        return None
    out = {"mutex": "known", "status": "ok"}
    for f in files:
        for line in f.read_text().splitlines():
            if not line.startswith("lockwait "):
                continue
            if "status=" in line:
                out["status"] = line.split("status=", 1)[1]
            if "cgroup_mutex=unknown" in line:
                out["mutex"] = "unknown"
            t = dict(tok.split("=", 1) for tok in line.split()[1:] if "=" in tok)
            if "lock" not in t:
                continue
            c = out.setdefault((t["lock"], t["holder"]), [0, 0.0, 0.0])
            c[0] += int(t["waits"])
            c[1] += float(t["total_ms"])
            c[2] = max(c[2], float(t["max_ms"]))
    return out


def mean(v):
    return statistics.fmean(v) if v else None


def main():
    args = sys.argv[1:]
    out_dir, command, vcpus = Path(args[0]), args[1], [int(v) for v in args[2].split(",")]
    labels, skips = {}, {}
    rest = args[3:]
    native = False
    i = 0
    while i < len(rest):
        if rest[i] == "--native":
            native = True
            i += 1
            continue
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
    setups, rounds, recs = {}, {}, {}
    for n in vcpus:
        d = out_dir / f"v{n}" / "fleet"
        setups[n] = {**kv(d / "setup.txt"), **kv(out_dir / f"v{n}" / "host.txt")}
        for r in sorted(d.glob("r*-*")) if d.exists() else []:
            rnd, key = r.name[1:].split("-", 1)
            c = {**kv(r / "probe.txt"), **kv(r / "work.txt"), **kv(r / "tree.txt")}
            rounds.setdefault((n, key), {})[int(rnd)] = c
        for key in labels:
            rec = kv(d / key / "rec.txt")
            rec["lockwait"] = lockwaits(sorted(d.glob(f"r*-{key}")) if d.exists() else [])
            rec.update(phases(d / key / "phases.jsonl"))
            recs[(n, key)] = rec

    def cpu_per_sample(rec):
        if num(rec.get("samples")) and num(rec.get("cpu_usec")) is not None:
            return num(rec["cpu_usec"]) / 1e3 / num(rec["samples"])
        return None

    def cpu_cell(key, rec):
        # The spinner writes no samples: its CPU per second of window.
        if key == "spin" and num(rec.get("cpu_usec")) is not None and num(rec.get("window_s")):
            return f"{num(rec['cpu_usec']) / 1e3 / num(rec['window_s']):.0f} per s"
        return fmt(cpu_per_sample(rec))

    def fmt(v, f="{:.1f}"):
        return "–" if v is None else f.format(v)

    cpus = "CPUs" if native else "vCPUs"
    print("### Setup (this machine natively, its real CPUs)\n" if native
          else "### Setup (TCG, one QEMU thread for all vCPUs)\n")
    print(f"| {cpus} | boot s | tree s | processes s | cgroups | processes | tasks "
          f"| {'MiB used' if native else 'guest MiB used'} "
          f"| churn cycles (slowest ms) | cgroups at end | {'whole run s' if native else 'whole VM s'} |")
    print("| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
    for n in vcpus:
        s = setups[n]
        g = lambda k: s.get(k, "–")
        print(f"| {n} | {g('boot_s')} | {g('tree_s')} | {g('procs_s')} | {g('cgroups')} | {g('processes')} "
              f"| {g('tasks')} | {g('mem_used_mib')} | {g('churn_cycles')} ({g('churn_max_ms')}) "
              f"| {g('cgroups_at_end')} | {g('host_s')} |")
    print()

    for n in vcpus:
        print(f"### {n} {cpus}: the workload's view\n")
        print("Prober: mkdir, attach, detach, rmdir every 10 ms, ms per cycle; missed: 10 ms ticks "
              "skipped because a cycle overran. Throughput: the workers' ops/s, and per round "
              "against the same round without a recorder. Median over rounds (range). Recorder "
              "CPU: its cgroup's usage_usec from a sample before the first round to one after the "
              "last / samples in between. Pass: ours' BPF pass per sample (--phase-times), mean "
              "(slowest).\n")
        print("| recorder | prober p50 ms | prober p99 ms | prober max ms | missed ticks "
              "| throughput ops/s | vs none | recorder CPU ms/sample | samples | pass wall ms | pass CPU ms |")
        print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
        base = rounds.get((n, "none"), {})
        for key, label in labels.items():
            if key in skips:
                print(f"| {label} | skipped: {skips[key]} |||||||||| ")
                continue
            rec, rs = recs[(n, key)], rounds.get((n, key), {})
            status = rec.get("status", "no results")
            if not status.startswith("ok"):
                problems.append(f"{n} vCPUs, {key}: {status}")
                print(f"| {label} | {status} |||||||||| ")
                continue
            for r, c in rs.items():
                if not num(c.get("cycles")) or not num(c.get("ops_s")):
                    problems.append(f"{n} vCPUs, {key}, round {r}: no prober cycles or no throughput")
            if key not in ("none", "spin") and not num(rec.get("samples")):
                problems.append(f"{n} vCPUs, {key}: no samples in the window")
            if key == "bpf" and not rec["pass_wall"]:
                problems.append(f"{n} vCPUs, {key}: no BPF pass in --phase-times")
            col = lambda k: [num(c.get(k)) for c in rs.values()]
            ratio = [num(c.get("ops_s")) / num(base[r]["ops_s"]) for r, c in rs.items()
                     if r in base and num(base[r].get("ops_s")) and num(c.get("ops_s"))]
            pass_wall = fmt(mean(rec["pass_wall"]), "{:.2f}")
            if rec["pass_wall"]:
                pass_wall += f" ({max(rec['pass_wall']):.1f})"
            none = key == "none"
            print(f"| {label} | {spread(col('p50_ms'), '{:.2f}')} | {spread(col('p99_ms'))} "
                  f"| {spread(col('max_ms'))} | {spread(col('missed_ticks'), '{:.0f}')} "
                  f"| {spread(col('ops_s'), '{:.0f}')} | {'1' if none else spread(ratio, '{:.3f}')} "
                  f"| {'–' if none else cpu_cell(key, rec)} | {'–' if none else rec.get('samples', '–')} "
                  f"| {pass_wall} | {fmt(mean(rec['pass_cpu']), '{:.2f}')} |")
        print()

    # Who held the mutexes the host's tasks waited for, over the prober's windows.
    for n in vcpus:
        waits = {k: recs[(n, k)].get("lockwait") for k in labels if k not in skips}
        if not any(waits.values()):
            continue
        unknown = any(w and w["mutex"] == "unknown" for w in waits.values())
        print(f"### {n} {cpus}: who the host's tasks waited for\n")
        print("`cgroup-lock-wait` (lock tracepoints) over the prober's windows, all rounds: every "
              "wait for a contended mutex, booked to the task holding it when the wait began "
              "(its owner word); cell: waits / total ms / longest ms. "
              + ("cgroup_mutex's address is not in this kernel's kallsyms: its waits are "
                 "among the other mutexes'.\n" if unknown else
                 "cgroup_mutex (every cgroup mkdir, rmdir and attach takes it) apart.\n"))
        if unknown:
            cols = [("other_mutex", h) for h in ("recorder", "kernel", "other")]
            names = ["any mutex held by the recorder", "by kernel threads", "by other tasks"]
        else:
            cols = [("cgroup_mutex", "recorder"), ("cgroup_mutex", "kernel"), ("cgroup_mutex", "other"),
                    ("other_mutex", "recorder")]
            names = ["cgroup_mutex held by the recorder", "by kernel threads", "by other tasks",
                     "other mutexes held by the recorder"]
        print("| recorder | " + " | ".join(names) + " |")
        print("| --- | " + " | ".join("--:" for _ in cols) + " |")
        for key, label in labels.items():
            w = waits.get(key)
            if not w:
                continue
            if w["status"] != "ok":
                problems.append(f"{n} {cpus}, {key}: cgroup-lock-wait {w['status']}")
                print(f"| {label} | {w['status']} |" + "|" * len(cols))
                continue
            cell = lambda c: "{} / {:.1f} / {:.2f}".format(*c) if c else "–"
            print(f"| {label} | " + " | ".join(cell(w.get(c)) for c in cols) + " |")
        print()

    print("### The recorder's view: CPU per sample (its cgroup's usage_usec / samples), ms\n")
    keys = [k for k in labels if k not in ("none", "spin")]
    print(f"| {cpus} | " + " | ".join(labels[k] for k in keys)
          + " | ours BPF: pass wall ms | pass CPU ms | cgroups ms | processes ms | ours BPF / below 0.9 |")
    print("| --: | " + " | ".join("--:" for _ in keys) + " | --: | --: | --: | --: | --: |")
    for n in vcpus:
        per = {k: cpu_per_sample(recs[(n, k)]) for k in keys}
        row = ["skipped" if k in skips else f"{fmt(per[k])} ({recs[(n, k)].get('samples', '–')} samples)"
               if per[k] is not None else "–" for k in keys]
        b = recs.get((n, "bpf"), phases())
        rel = f"{per['bpf'] / per['below09']:.3f}" if per.get("bpf") and per.get("below09") else "–"
        print(f"| {n} | " + " | ".join(row) + f" | {fmt(mean(b['pass_wall']), '{:.2f}')} "
              f"| {fmt(mean(b['pass_cpu']), '{:.2f}')} | {fmt(mean(b['cgroups_wall']))} "
              f"| {fmt(mean(b['procs_wall']))} | {rel} |")
    print()
    for p in problems:
        print(f"[bench] fleet: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
