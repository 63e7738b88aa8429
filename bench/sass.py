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
    channel changes; never, channels last)."""
    skip = set()
    for i in range(lo, hi):
        m = re.match(r"@!?P\d+\s+BRA\s+`\((\.L_x_\d+)\)", ins[i])
        if m and m.group(1) in labels and i < labels[m.group(1)] <= hi:
            skip.update(range(i + 1, labels[m.group(1)]))
    return [ins[i] for i in range(lo, hi + 1) if i not in skip]


def analyse(sass, vec, copy):
    """The element loops of the kernel's one path left (bench/sass.sh drops
    the 64-bit one): a map's loop, a reduction's one per phase; a copy's
    cheapest per byte (its 4-unit unrolled loop, not the remainder's). Per
    loop: hot instructions and bytes moved per element (vec elements an
    iteration)."""
    ins, labels = parse(sass)
    cands = []
    for lo, hi in loops(ins, labels):
        body = hot_path(ins, labels, lo, hi)
        bytes_ = sum(WIDTH[m.group(2)] for t in body for m in [LOAD.search(t)] if m)
        if bytes_:
            cands.append((len(body), bytes_, sum(bool(re.match(r"(@!?P\d+\s+)?(STL|LDL)\b", t)) for t in body)))
    if copy and cands:
        cands = [min(cands, key=lambda c: c[0] / c[1])]
    return [(n / vec, b / vec, spills) for n, b, spills in cands]


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
    rows, total_mem, total_issue = [], 0.0, 0.0
    for name, row in sorted(by_kernel.items(), key=lambda kv: -kv[1]["bytes"]):
        src = open(f"{srcdir}/{name}.cu").read()
        m = re.search(r"a\.vec == (\d+)", src)
        vec = int(m.group(1)) if m else 1
        per_phase = analyse(open(f"{srcdir}/{name}.sass").read(), vec, name.startswith("yk_copy_"))
        mem_ms = row["bytes"] / BW * 1e3
        total_mem += mem_ms
        if not per_phase:
            rows.append((name, row, regs.get(name, 0), vec, None, None, mem_ms, None, None))
            total_issue += mem_ms
            continue
        # a launch moves its bytes over its phases, each phase every element once
        instr = sum(p[0] for p in per_phase)
        per_elem_bytes = sum(p[1] for p in per_phase)
        elements = row["bytes"] / per_elem_bytes if per_elem_bytes else 0
        issue_ms = elements * instr / (SMS * ISSUE * CLOCK) * 1e3
        total_issue += max(issue_ms, mem_ms)
        rows.append((name, row, regs.get(name, 0), vec, instr, per_elem_bytes, mem_ms, issue_ms, sum(p[2] for p in per_phase)))
    fmt = "%-28s %8s %8s %5s %6s %3s %10s %10s %8s %9s %9s %11s"
    print(fmt % ("kernel", "launches", "GB", "regs", "blk/SM", "V", "instr/elem", "bytes/elem", "mem_ms", "issue_ms", "issue/mem", "loop_spills"))
    for name, row, r, vec, instr, bpe, mem_ms, issue_ms, spills in rows:
        if instr is None:
            print(fmt % (name, row["launches"], "%.3f" % (row["bytes"] / 1e9), r, blocks_per_sm(r), vec, "-", "-", "%.3f" % mem_ms, "-", "-", "-"))
        else:
            print(fmt % (name, row["launches"], "%.3f" % (row["bytes"] / 1e9), r, blocks_per_sm(r), vec, "%.1f" % instr, "%.1f" % bpe, "%.3f" % mem_ms,
                         "%.3f" % issue_ms, "%.2f" % (issue_ms / mem_ms if mem_ms else 0), spills))
    print("generated kernels: %.2f ms at the bandwidth floor, %.2f ms where the issue rate binds instead (%.2fx)" % (total_mem, total_issue, total_issue / total_mem))
    # the highest issue/mem of the kernels that move 1% of the bytes or more
    total_bytes = sum(r[1]["bytes"] for r in rows)
    big = [r for r in rows if r[7] is not None and r[6] > 0 and r[1]["bytes"] >= total_bytes / 100]
    worst = max(big, key=lambda r: r[7] / r[6]) if big else None
    text = "%s: issue/mem %.2f, %.2f GB" % (worst[0], worst[7] / worst[6], worst[1]["bytes"] / 1e9) if worst else "-"
    json.dump({"floor_ms": total_mem, "bound_ms": total_issue, "worst": text}, open(info + ".json", "w"))


if __name__ == "__main__":
    main()
