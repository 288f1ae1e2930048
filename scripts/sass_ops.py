#!/usr/bin/env python3
"""Opcode counts per kernel from `cuobjdump --dump-sass` output, side by side.

    sass_ops.py DUMP [DUMP ...] [--match REGEX] [--top N]

For each function whose mangled name matches REGEX (default: flash_fwd_kernel), counts
every SASS opcode (the mnemonic without its .modifiers) and prints one column per
function: total instructions, then the N most frequent opcodes over all of them. Used by
the ulysses device stage to compare the local-store and remote-store attention kernels
(same mainloop source; any difference in the counts is code generation).
"""
import argparse
import collections
import re
import sys

FUNC = re.compile(r"Function : (\S+)")
INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def short(name):
    d = re.search(r"FlashFwdTraitsILi(\d+)ELi\d+ELb([01])E", name)
    e = "remote" if "RemoteStore" in name else "local" if "LocalStore" in name else "?"
    s = re.search(r"SignalE(\d)", name)
    sig = {"1": "/slice", "2": "/cta"}.get(s.group(1), "") if s else ""
    return f"D{d.group(1)}{'pp' if d.group(2) == '1' else ''}:{e}{sig}" if d else name[:24]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dumps", nargs="+")
    ap.add_argument("--match", default="flash_fwd_kernel")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    counts = collections.OrderedDict()
    for path in a.dumps:
        try:
            text = open(path, errors="replace").read()
        except OSError as e:
            sys.exit(f"sass_ops: {path}: {e.strerror}")
        cur = None
        for line in text.splitlines():
            m = FUNC.search(line)
            if m:
                cur = short(m.group(1)) if re.search(a.match, m.group(1)) else None
                if cur:
                    counts.setdefault(cur, collections.Counter())
                continue
            if cur:
                i = INSN.search(line)
                if i:
                    counts[cur][i.group(1).split(".")[0]] += 1
    if not counts:
        sys.exit(f"sass_ops: no function matching '{a.match}' in {', '.join(a.dumps)}")
    names = list(counts)
    total = collections.Counter()
    for c in counts.values():
        total.update(c)
    w = max(10, *(len(n) for n in names))
    print(f"{'opcode':<10} " + " ".join(f"{n:>{w}}" for n in names))
    print(f"{'(all)':<10} " + " ".join(f"{sum(counts[n].values()):>{w}}" for n in names))
    for op, _ in total.most_common(a.top):
        print(f"{op:<10} " + " ".join(f"{counts[n][op]:>{w}}" for n in names))


if __name__ == "__main__":
    main()
