#!/usr/bin/env python3
"""The loops of a cuobjdump SASS listing that issue HGMMA, with what ptxas encoded in them.

  sass_loops.py <file.sass> [--loop N] [--list]

For each loop (a backward branch whose body holds an HGMMA; the first is the innermost main
loop of a flagship kernel) one line: instructions, HGMMA, R2UR, IMAD, MUFU, and the sum of the
stall counts ptxas wrote into the instructions' control codes. --loop N then prints loop N's
stall sum per opcode, with how many of each wait on a scoreboard; --list its instructions
with their control codes (s: stall cycles, wb/rb: the write/read scoreboard set, 7 = none;
wm: the scoreboards waited on).

The control codes are bits 41-57 of each instruction's second 64-bit word (Volta and later):
stall 41-44, yield 45, write scoreboard 46-48, read scoreboard 49-51, wait mask 52-57. A
stall count is cycles the warp waits before its next instruction whatever else happens;
a scoreboard wait lasts until a variable-latency result (MUFU, SHFL, loads) lands. The
forty-sixth session read d 64's MUFU pairs this way (docs/BENCHMARKS.md)."""
import collections
import re
import signal
import sys

INSTR = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s+/\* (0x[0-9a-f]+) \*/")
WORD = re.compile(r"/\* (0x[0-9a-f]+) \*/")
TARGET = re.compile(r"BRA.*?(0x[0-9a-f]+)")


def load(path):
    """[(address, instruction text, high control word)]"""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = INSTR.match(lines[i])
        if m and i + 1 < len(lines) and WORD.search(lines[i + 1]):
            out.append((int(m.group(1), 16), m.group(2), int(WORD.search(lines[i + 1]).group(1), 16)))
            i += 2
        else:
            i += 1
    return out


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def control(word):
    return {
        "stall": (word >> 41) & 0xF,
        "wb": (word >> 46) & 7,
        "rb": (word >> 49) & 7,
        "wait": (word >> 52) & 0x3F,
    }


def loops(code):
    at = {a: k for k, (a, _, _) in enumerate(code)}
    found = []
    for k, (a, text, _) in enumerate(code):
        m = TARGET.search(text)
        if m:
            t = int(m.group(1), 16)
            if t < a and t in at and any("HGMMA" in x for _, x, _ in code[at[t] : k + 1]):
                found.append(code[at[t] : k + 1])
    return found


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (read through `head`: stop quietly)
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    code = load(args[0])
    body = loops(code)
    if not body:
        sys.exit(f"{args[0]}: no loop with an HGMMA")
    for n, b in enumerate(body):
        c = collections.Counter(opcode(x) for _, x, _ in b)
        stalls = sum(control(w)["stall"] for _, _, w in b)
        print(
            f"loop {n}: {len(b)} instructions, HGMMA {c['HGMMA']}, R2UR {c['R2UR']}, IMAD {c['IMAD']}, "
            f"MUFU {c['MUFU']}, static stalls {stalls} cycles"
        )
    if "--loop" in args:
        b = body[int(args[args.index("--loop") + 1])]
        by_op, count, waiting = collections.Counter(), collections.Counter(), collections.Counter()
        for _, text, word in b:
            op, ctl = opcode(text), control(word)
            by_op[op] += ctl["stall"]
            count[op] += 1
            waiting[op] += ctl["wait"] != 0
        for op, s in by_op.most_common(12):
            print(f"  {op:10s} {count[op]:4d} x, stalls {s:5d} (mean {s / count[op]:.2f}), {waiting[op]} wait on a scoreboard")
        if "--list" in args:
            for a, text, word in b:
                ctl = control(word)
                print(f"  {a:05x} s{ctl['stall']:2d} wb{ctl['wb']} rb{ctl['rb']} wm{ctl['wait']:06b} {text}")


if __name__ == "__main__":
    main()
