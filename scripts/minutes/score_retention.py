#!/usr/bin/env python3
"""Which planted facts of scripts/minutes/gen_retention.py a window's text holds: the
sentence verbatim (its first 40 characters) and every key, case-insensitively; -v lists the
missed ones.

    python3 scripts/minutes/score_retention.py OUTDIR/facts.json WINDOW.txt [-v]
"""
import json, sys
facts = json.load(open(sys.argv[1])); win = open(sys.argv[2]).read().lower()
verbose = len(sys.argv) > 3
def held(p):
    return all(k.lower() in win for k in p["keys"]) and p["sentence"].lower()[:40] in win
f = [held(p) for p in facts["facts"]]; d = [held(p) for p in facts["decoys"]]
by = {}
for p, h in zip(facts["facts"], f):
    by.setdefault(p["kind"], [0, 0]); by[p["kind"]][0] += h; by[p["kind"]][1] += 1
print(f"facts {sum(f)}/{len(f)} = {100*sum(f)/len(f):.0f}%  decoys {sum(d)}/{len(d)}  " + " ".join(f"{k}:{a}/{b}" for k, (a, b) in by.items()))
if verbose:
    for p, h in zip(facts["facts"], f):
        if not h: print("  MISS", p["round"], p["sentence"])
