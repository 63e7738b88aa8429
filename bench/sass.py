#!/usr/bin/env python3
# bench/sass.py — a static issue-versus-memory model of a CUDA plan's
# generated kernels, for sessions without a GPU (run by bench/sass.sh, which
# compiles the plan and the kernels' sm_90 cubins). Reads each kernel's SASS
# (nvdisasm), takes the loop of its vectorized path, and compares the time its
# instructions need to issue with the time its bytes need to move. Owns no
# build step and touches no plan.
import json
import re
import sys

# H100 SXM: 132 multiprocessors, 4 schedulers issuing one warp instruction a
# cycle each (128 thread-instructions a cycle), 1.755 GHz under load, 3.35 TB/s
SMS, ISSUE, CLOCK, BW = 132, 128, 1.755e9, 3.35e12
REGS_PER_SM, THREADS, MAX_BLOCKS = 65536, 256, 8
# conversions to and from fp64 (F2F.F64.F32 widening a term for the fp64
# sums) go through a pipe of 16 a cycle a multiprocessor on sm_80/sm_90, an
# eighth of the issue rate (the CUDA programming guide's throughput table)
F64_CVT = re.compile(r"^(@!?P\d+\s+)?(F2F\.F64|F2F\.F32\.F64|I2F\.F64|F2I\.F64)")
F64_CVT_RATE = 16
# Little's law: a load waits about this long under full load (an assumed
# round figure for HBM3 at high occupancy, not a measurement), so a
# multiprocessor streams at most the bytes it has in flight per LATENCY
LATENCY = 700e-9
# plain global loads and stores (a split reduction's .STRONG reads of the blocks' sums are once a block)
LOAD = re.compile(r"\b(LDG|STG)\.E(?:\.(U16|S16|64|128))?(?![.\w])")
WIDTH = {None: 4, "U16": 2, "S16": 2, "64": 8, "128": 16}


def parse(sass):
    """Instructions (without addresses) and the index each label points at."""
    ins, labels = [], {}
    for line in sass.split("\n"):
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            ins.append(m.group(1))
            continue
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
    return ins, labels


def loops(ins, labels):
    """(first, last) of each backward branch's body."""
    out = []
    for i, t in enumerate(ins):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", t)
        if m and m.group(1) in labels and labels[m.group(1)] <= i:
            out.append((labels[m.group(1)], i))
    return out


def hot_path(ins, labels, lo, hi):
    """A loop's instructions less the blocks a forward conditional branch
    inside it skips (the per-channel loads a thread redoes only when its
    channel changes; never, channels last). A skipped block that stores is
    an element's own work (a reduction's row past the end, branched around)
    and stays."""
    skip = set()
    for i in range(lo, hi):
        m = re.match(r"@!?P\d+\s+BRA\s+`\((\.L_x_\d+)\)", ins[i])
        if m and m.group(1) in labels and i < labels[m.group(1)] <= hi:
            block = range(i + 1, labels[m.group(1)])
            if not any(re.search(r"\bSTG\b", ins[j]) for j in block):
                skip.update(block)
    return [ins[i] for i in range(lo, hi + 1) if i not in skip]


def regs_of(operand):
    """The registers an operand names (R8.64: R8 and R9)."""
    out = []
    for m in re.finditer(r"\bR(\d+)(\.64)?", operand):
        out += [int(m.group(1))] + ([int(m.group(1)) + 1] if m.group(2) else [])
    return out


def in_flight(body):
    """Bytes of loads a thread has issued and not yet waited on, at most
    over the loop: a load is waited on when an instruction reads or
    overwrites one of its registers. Twice round the loop, so that loads
    issued for the next iteration count (the first round starts empty).
    Optimistic where the compiler makes loads share a scoreboard."""
    pending, most = {}, 0  # register -> (load, bytes)
    for rnd in range(2):
        for n, t in enumerate(body):
            t = re.sub(r"^@!?P\d+\s+", "", t)
            op, _, rest = t.partition(" ")
            ops = [o.strip() for o in re.split(r",(?![^\[]*\])", rest)] if rest else []
            store = op.startswith(("ST", "RED", "ATOM"))
            reads = [r for o in (ops if store else ops[1:]) for r in regs_of(o)]
            writes = [] if store or not ops else regs_of(ops[0])
            done = {pending[r][0] for r in reads + writes if r in pending}
            pending = {r: v for r, v in pending.items() if v[0] not in done}
            m = LOAD.search(t)
            if m and m.group(1) == "LDG":
                width = WIDTH[m.group(2)]
                base = regs_of(ops[0])[0]
                for r in range(base, base + max(1, width // 4)):
                    pending[r] = ((rnd, n), width)
            if rnd:
                most = max(most, sum(w for _, w in set(pending.values())))
    return most


def analyse(sass, vec, copy, unroll):
    """The element loops of the kernel's one path left (bench/sass.sh drops
    the 64-bit one): a map's loop, a reduction's one per phase; a copy's
    cheapest per byte (its 4-unit unrolled loop, not the remainder's). Per
    loop: hot instructions, bytes moved and fp64 conversions per element
    (vec elements a row, unroll[i] rows an iteration of reduction phase i's
    loop), its spills and in_flight's bytes."""
    ins, labels = parse(sass)
    cands = []
    for lo, hi in loops(ins, labels):
        body = hot_path(ins, labels, lo, hi)
        bytes_ = sum(WIDTH[m.group(2)] for t in body for m in [LOAD.search(t)] if m)
        if bytes_:
            cands.append((len(body), bytes_, sum(bool(re.match(r"(@!?P\d+\s+)?(STL|LDL)\b", t)) for t in body),
                          sum(bool(F64_CVT.match(t)) for t in body), in_flight(body)))
    if copy and cands:
        cands = [min(cands, key=lambda c: c[0] / c[1])]
    if len(set(unroll)) > 1 and len(unroll) != len(cands):
        sys.exit("bench/sass.py: %d element loops for %d reduction phases of different unrolls" % (len(cands), len(unroll)))
    rows = [unroll[i] if len(unroll) == len(cands) else (unroll[0] if unroll else 1) for i in range(len(cands))]
    return [(n / (vec * u), b / (vec * u), spills, cvt / (vec * u), flight) for (n, b, spills, cvt, flight), u in zip(cands, rows)]


def blocks_per_sm(regs):
    alloc = (regs + 7) // 8 * 8
    return min(MAX_BLOCKS, REGS_PER_SM // (alloc * THREADS)) if regs else MAX_BLOCKS


def main():
    inspect, srcdir, info = sys.argv[1], sys.argv[2], sys.argv[3]
    by_kernel = json.load(open(inspect))["groups"]["traffic_bytes"]["by_kernel"]
    regs = {}
    for line in open(info):
        name, r = line.split()
        regs[name] = int(r)
    rows, total = [], {"mem": 0.0, "issue": 0.0, "lat": 0.0, "bound": 0.0}
    for name, row in sorted(by_kernel.items(), key=lambda kv: -kv[1]["bytes"]):
        src = open(f"{srcdir}/{name}.cu").read()
        m = re.search(r"a\.vec == (\d+)", src)
        vec = int(m.group(1)) if m else 1
        unroll = [int(u) for u in re.findall(r"const int U_ = (\d+);", src)]
        per_phase = analyse(open(f"{srcdir}/{name}.sass").read(), vec, name.startswith("yk_copy_"), unroll)
        r = {"name": name, "row": row, "regs": regs.get(name, 0), "vec": vec, "mem": row["bytes"] / BW * 1e3}
        total["mem"] += r["mem"]
        if not per_phase:
            rows.append(r)
            for key in ("issue", "lat", "bound"):
                total[key] += r["mem"]
            continue
        # a launch moves its bytes over its phases, each phase every element once
        blocks = blocks_per_sm(r["regs"])
        r["bpe"] = sum(p[1] for p in per_phase)
        elements = row["bytes"] / r["bpe"]
        r["instr"] = sum(p[0] for p in per_phase)
        r["issue"] = elements * sum(max(p[0] / ISSUE, p[3] / F64_CVT_RATE) for p in per_phase) / (SMS * CLOCK) * 1e3
        # each phase's bytes at what its loads in flight sustain (stores are not waited on; counted as loads here)
        sustained = [min(BW, SMS * blocks * THREADS * p[4] / LATENCY) if p[4] else BW for p in per_phase]
        r["lat"] = sum(elements * p[1] / bw for p, bw in zip(per_phase, sustained)) * 1e3
        r["flight"] = min(p[4] for p in per_phase)
        r["spills"] = sum(p[2] for p in per_phase)
        r["bound"] = max(r["mem"], r["issue"], r["lat"])
        for key in ("issue", "lat", "bound"):
            total[key] += max(r[key], r["mem"])
        rows.append(r)
    fmt = "%-28s %8s %7s %4s %6s %2s %10s %10s %7s %8s %9s %8s %7s %11s"
    print(fmt % ("kernel", "launches", "GB", "regs", "blk/SM", "V", "instr/elem", "bytes/elem", "mem_ms", "issue_ms", "issue/mem",
                 "flight_B", "lat_ms", "loop_spills"))
    for r in rows:
        head = (r["name"], r["row"]["launches"], "%.3f" % (r["row"]["bytes"] / 1e9), r["regs"], blocks_per_sm(r["regs"]), r["vec"])
        if "instr" not in r:
            print(fmt % (head + ("-", "-", "%.3f" % r["mem"], "-", "-", "-", "-", "-")))
        else:
            print(fmt % (head + ("%.1f" % r["instr"], "%.1f" % r["bpe"], "%.3f" % r["mem"], "%.3f" % r["issue"], "%.2f" % (r["issue"] / r["mem"] if r["mem"] else 0),
                                 r["flight"], "%.3f" % r["lat"], r["spills"])))
    print("generated kernels: %.2f ms at the bandwidth floor, %.2f ms where the issue rate binds instead (%.2fx), "
          "%.2f ms where the loads in flight do (%.2fx; %.0f ns a load assumed), %.2f ms under both (%.2fx)"
          % (total["mem"], total["issue"], total["issue"] / total["mem"], total["lat"], total["lat"] / total["mem"], LATENCY * 1e9,
             total["bound"], total["bound"] / total["mem"]))
    # the highest bound/mem of the kernels that move 1% of the bytes or more
    total_bytes = sum(r["row"]["bytes"] for r in rows)
    big = [r for r in rows if "instr" in r and r["mem"] > 0 and r["row"]["bytes"] >= total_bytes / 100]
    worst = max(big, key=lambda r: r["bound"] / r["mem"]) if big else None
    text = "%s: bound/mem %.2f (issue %.2f, loads in flight %.2f), %.2f GB" % (
        worst["name"], worst["bound"] / worst["mem"], worst["issue"] / worst["mem"], worst["lat"] / worst["mem"], worst["row"]["bytes"] / 1e9) if worst else "-"
    json.dump({"floor_ms": total["mem"], "issue_ms": total["issue"], "latency_ms": total["lat"], "bound_ms": total["bound"], "worst": text},
              open(info + ".json", "w"))


if __name__ == "__main__":
    main()
