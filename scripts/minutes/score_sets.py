#!/usr/bin/env python3
"""Asks each set question of OUTDIR (scripts/minutes/gen_sets.py, or any directory with a
debate.jsonl and a questions.json of [{question, gold: [line numbers]}]) with a strata
binary, into a store OUTDIR/db-TAG built on first use, and prints the mean citation recall
and precision (a question citing nothing scores 0 / 0); -v prints each question's.

    python3 scripts/minutes/score_sets.py STRATA_BINARY OUTDIR TAG [-v]

A binary built with a temporary `eprintln!("SETDUMP\t…")` of each set candidate in
`answer_set` (position, own evidence, label, quote; tab-separated) also leaves
OUTDIR/dump-TAG.json, the candidates with whether each is a member, for studying the cut
offline; without it the dump's candidate lists are empty.
"""
import json, subprocess, sys, os
BIN, D, TAG = sys.argv[1], sys.argv[2], sys.argv[3]
db = f"{D}/db-{TAG}"
if not os.path.exists(db):
    subprocess.run([BIN, "--db", db, "ingest", "--scope", "x", f"{D}/debate.jsonl"], capture_output=True, check=True)
    subprocess.run([BIN, "--db", db, "compress", "--scope", "x"], capture_output=True, check=True)
lines = [json.loads(l) for l in open(f"{D}/debate.jsonl")]
qs = json.load(open(f"{D}/questions.json"))
env = dict(os.environ, STRATA_X_SETDUMP="1", STRATA_LOG="error")
R = P = 0; dumps = []
for q in qs:
    r = subprocess.run([BIN, "--db", db, "query", "--scope", "x", "--json", q["question"]], capture_output=True, text=True, env=env)
    res = json.loads(r.stdout)
    cited = set()
    for c in res.get("citations", []):
        src = c.get("source") or c.get("span", {}).get("source", "")
        if "#" in src: cited.add(int(src.rsplit("#", 1)[1]))
    g = set(q["gold"])
    rec = len(cited & g) / len(g); prec = len(cited & g) / len(cited) if cited else 0.0
    R += rec; P += prec
    cands = []
    for l in r.stderr.splitlines():
        if l.startswith("SETDUMP"):
            _, i, own, label, quote = l.split("\t", 4)
            # which gold line holds the quote
            member = any(quote[:60] in lines[n - 1]["text"] for n in g)
            cands.append({"own": float(own), "label": label, "quote": quote, "member": member})
    dumps.append({"question": q["question"], "gold": len(g), "cands": cands})
    if len(sys.argv) > 4:
        print(f"{rec:.2f} {prec:.2f} {len(cited)} {q['question']}")
print(f"{D} {TAG}: recall {R/len(qs):.3f} precision {P/len(qs):.3f} ({len(qs)} questions)")
json.dump(dumps, open(f"{D}/dump-{TAG}.json", "w"), indent=0)
