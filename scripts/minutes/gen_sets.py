#!/usr/bin/env python3
"""Set questions in the held-back sets' shape (docs/EVAL.md, "Tried on 2026-12-06"): a
300-round, 5-speaker debate of real meeting filler (QMSum `train` turns) with third-person
minutes about 8 lowercase topics — a proposal, 2–3 objections in varied words ("argues
against", "voices opposition to", "is against"), 2–3 votes, 1–2 deadlines, 2 mentions — and
24 set questions with their gold turns ("Who opposed the T?", "How did the votes on the T
go?", "What deadlines were set for the T?"). Written by us: a regression check, never
evidence of a gain.

    python3 scripts/minutes/gen_sets.py SEED OUTDIR
    python3 scripts/minutes/score_sets.py STRATA_BINARY OUTDIR TAG [-v]

Writes OUTDIR/debate.jsonl and OUTDIR/questions.json ([{question, gold: [line numbers]}]).
"""
import json, os, random, sys

import filler

seed = int(sys.argv[1]); out = sys.argv[2]
rng = random.Random(seed)
os.makedirs(out, exist_ok=True)
turns = filler.meeting_turns(4, ended=True)

S = ["Okafor", "Lindqvist", "Dubois", "Tanaka", "Mensah"]
TOPICS = ["canal dredging", "stadium roof", "ferry timetable", "library extension", "cycle lane network",
          "flood barrier", "school meals contract", "heat pump grant", "tram depot", "youth centre lease",
          "harbour wall", "parking levy"]
rng.shuffle(TOPICS)
topics = TOPICS[:8]
R = 300
planted = [[[] for _ in S] for _ in range(R)]
busy = set()
def slot(lo, hi, sp=None, avoid=()):
    for _ in range(10000):
        r = rng.randrange(lo, min(max(hi, lo + 1), R)); s = sp if sp is not None else rng.randrange(5)
        if (r, s) not in busy and S[s] not in avoid:
            busy.add((r, s)); return r, s
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "September", "October", "November"]
gold = {}  # (topic, kind) -> list of (r, s)
reasons = ["the cost estimates are unreliable", "residents were not consulted", "it would overrun within a year",
           "the contractor has a poor record", "the money is needed elsewhere"]
for t in topics:
    who = rng.randrange(5)
    base = rng.randrange(0, R - 120)
    items = []
    items.append(("proposal", who, rng.choice([
        f"{S[who]} proposes the {t} at a cost of {rng.randrange(12,95)},{rng.randrange(100,999)} euros.",
        f"{S[who]} tables a motion to fund the {t}."])))
    objectors = rng.sample([i for i in range(5) if i != who], rng.randint(2, 3))
    for o in objectors:
        items.append(("objection", o, rng.choice([
            f"{S[o]} argues against the {t}, saying {rng.choice(reasons)}.",
            f"{S[o]} objects to the {t} because {rng.choice(reasons)}.",
            f"{S[o]} voices opposition to the {t}: {rng.choice(reasons)}.",
            f"{S[o]} is against the {t}, as {rng.choice(reasons)}."])))
    for _ in range(rng.randint(2, 3)):
        y = rng.randint(3, 5); n = 5 - y
        items.append(("vote", rng.randrange(5), rng.choice([
            f"Members approve the {t} by {y} votes to {n}.",
            f"The committee votes {y}-{n} to adopt the {t}.",
            f"The amendment on the {t} is carried {y} to {n}.",
            f"The motion to delay the {t} is rejected by {y} votes to {n}."])))
    for _ in range(rng.randint(1, 2)):
        d, m = rng.randrange(1, 28), rng.choice(MONTHS)
        items.append(("deadline", rng.randrange(5), rng.choice([
            f"The clerk is asked to publish the tender for the {t} by {d} {m}.",
            f"{S[rng.randrange(5)]} undertakes to report back on the {t} no later than {d} {m}.",
            f"A final decision on the {t} is due on {d} {m}."])))
    for _ in range(2):
        items.append(("mention", rng.randrange(5), rng.choice([
            f"{S[rng.randrange(5)]} asks for more detail on the {t} before the next meeting.",
            f"{S[rng.randrange(5)]} notes that the {t} was discussed with residents last month.",
            f"{S[rng.randrange(5)]} says the {t} is on the agenda again."])))
    kinds_order = ["proposal", "mention", "objection", "vote", "deadline"]
    items.sort(key=lambda x: kinds_order.index(x[0]) + rng.random())
    pos = sorted(rng.sample(range(base, base + 120), len(items)))
    for (kind, sp, sent), r in zip(items, pos):
        rr, ss = slot(r, r + 3, sp)
        planted[rr][ss].append(sent)
        gold.setdefault((t, kind), []).append((rr, ss))

lines = []
p = rng.randrange(len(turns))
lineno = {}
with open(f"{out}/debate.jsonl", "w") as f:
    for r in range(R):
        order = list(range(5)); rng.shuffle(order)
        for s in order:
            parts = []
            for _ in range(rng.randint(1, 2)):
                parts.append(turns[p % len(turns)]); p += 1
            for x in planted[r][s]:
                parts.insert(rng.randint(0, len(parts)), x)
            f.write(json.dumps({"round": r + 1, "speaker": S[s], "text": " ".join(parts)}) + "\n")
            lines.append((r, s)); lineno[(r, s)] = len(lines)
qs = []
for t in topics:
    for kind, q in [("objection", f"Who opposed the {t}?"), ("vote", f"How did the votes on the {t} go?"),
                    ("deadline", f"What deadlines were set for the {t}?")]:
        qs.append({"question": q, "gold": sorted(lineno[x] for x in gold[(t, kind)])})
json.dump(qs, open(f"{out}/questions.json", "w"), indent=1)
