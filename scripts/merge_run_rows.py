#!/usr/bin/env python3
"""Merge the results files of several runs into one, rows in run order.

    merge_run_rows.py OUT.json "COMMAND" RUN1.json RUN2.json ...

Each run's file has `card`, `gpus`, `date`, `command` and `rows` (the `xstage dit
--json` format). The merged file keeps the last run's head fields, the given COMMAND
(what produced the set), and every row with its own run's command line. Writes
nothing when no row was found (a stage cut short keeps no half file).
"""
import json
import os
import sys


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: merge_run_rows.py OUT.json COMMAND RUN.json...")
    out, command, runs = argv[0], argv[1], argv[2:]
    rows, head = [], {}
    for f in sorted(runs):
        if not os.path.exists(f):  # an unmatched shell glob: no run wrote a file
            continue
        with open(f) as fh:
            d = json.load(fh)
        rows += [{**r, "command": d["command"]} for r in d["rows"]]
        head = {k: v for k, v in d.items() if k not in ("rows", "command")}
    if rows:
        with open(out, "w") as fh:
            json.dump({**head, "command": command, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
