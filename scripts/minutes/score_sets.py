#!/usr/bin/env python3
"""Asks each set question of OUTDIR (scripts/minutes/gen_sets.py, or any directory with a
debate.jsonl and a questions.json of [{question, gold: [line numbers]}]) with a strata
binary, into a store OUTDIR/db-TAG built on first use, and prints the mean citation recall
and precision (a question citing nothing scores 0 / 0); -v prints each question's, with
whether the answer is ready and its confidence.

    python3 scripts/minutes/score_sets.py STRATA_BINARY OUTDIR TAG [-v]
"""
import json, os, subprocess, sys

BIN, D, TAG = sys.argv[1], sys.argv[2], sys.argv[3]
db = f"{D}/db-{TAG}"
if not os.path.exists(db):
    subprocess.run([BIN, "--db", db, "ingest", "--scope", "x", f"{D}/debate.jsonl"], capture_output=True, check=True)
    subprocess.run([BIN, "--db", db, "compress", "--scope", "x"], capture_output=True, check=True)
qs = json.load(open(f"{D}/questions.json"))
env = dict(os.environ, STRATA_LOG="error")
R = P = 0
for q in qs:
    r = subprocess.run([BIN, "--db", db, "query", "--scope", "x", "--json", q["question"]],
                       capture_output=True, text=True, env=env, check=True)
    out = json.loads(r.stdout)
    cited = {int(c["source"].rsplit("#", 1)[1]) for c in out.get("citations", [])}
    g = set(q["gold"])
    rec = len(cited & g) / len(g); prec = len(cited & g) / len(cited) if cited else 0.0
    R += rec; P += prec
    if len(sys.argv) > 4:
        ready = "ready" if out.get("ready") else "not ready"
        print(f"{rec:.2f} {prec:.2f} {len(cited)} {ready} {out.get('confidence', 0):.2f} {q['question']}")
print(f"{D} {TAG}: recall {R/len(qs):.3f} precision {P/len(qs):.3f} ({len(qs)} questions)")
