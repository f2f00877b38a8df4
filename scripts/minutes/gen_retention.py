#!/usr/bin/env python3
"""A retention debate in the held-back sets' shape (docs/EVAL.md, "Tried on 2026-12-06"):
300 rounds, 5 speakers, 8 topics, each with a proposal, an objection, a revised figure, a
vote and a deadline written as third-person minutes ("Okafor proposes capping the youth
centre lease at 58,661 euros."), 40 one-off decoys ("Tanaka notes that the Vertanfenby
bakery now sells 17 kinds of bread."), and real filler: consecutive QMSum `train` turns
(`meeting`) or State of the Union sentences (`sotu`). Written by us, with the held-back
sets' description in view: a regression check, never evidence of a gain.

    python3 scripts/minutes/gen_retention.py SEED OUTDIR [meeting|sotu]
    strata --db OUTDIR/db ingest --scope x OUTDIR/debate.jsonl && strata --db OUTDIR/db compress --scope x
    strata --db OUTDIR/db context --scope x --level auto --budget 2000 > OUTDIR/window.txt
    python3 scripts/minutes/score_retention.py OUTDIR/facts.json OUTDIR/window.txt [-v]

Writes OUTDIR/debate.jsonl and OUTDIR/facts.json ({facts, decoys}: kind, sentence, keys,
round). Needs the QMSum cache (scripts/fetch-qmsum.sh) or the SOTU one (scripts/fetch-sotu.sh)
under ${STRATA_CACHE:-~/.cache/strata} (`filler.py`).
"""
import json, os, random, sys

import filler

seed = int(sys.argv[1]); out = sys.argv[2]; filler_kind = sys.argv[3] if len(sys.argv) > 3 else "meeting"
rng = random.Random(seed)
os.makedirs(out, exist_ok=True)
turns = filler.meeting_turns(3) if filler_kind == "meeting" else filler.sotu_sentences(4)

SPEAKERS = ["Okafor", "Lindqvist", "Dubois", "Tanaka", "Mensah"]
TOPICS = ["pilot budget", "ferry timetable", "library extension", "cycle lane network",
          "flood barrier", "school meals contract", "harbour dredging", "heat pump grant",
          "tram depot", "youth centre lease"]
rng.shuffle(TOPICS)
topics = TOPICS[:8]
R = 300
planted = [[[] for _ in SPEAKERS] for _ in range(R)]
facts, decoys = [], []
busy = set()

def slot(lo, hi):
    for _ in range(10000):
        r = rng.randrange(lo, min(max(hi, lo + 1), R)); s = rng.randrange(5)
        if (r, s) not in busy:
            busy.add((r, s)); return r, s

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "September", "October", "November"]
for t in topics:
    who = rng.choice(SPEAKERS); other = rng.choice([s for s in SPEAKERS if s != who])
    at = sorted(rng.randrange(R) for _ in range(5))
    amt = f"{rng.randrange(12, 95)},{rng.randrange(100, 999)}"
    amt2 = f"{rng.randrange(12, 95)},{rng.randrange(100, 999)}"
    yes = rng.randrange(3, 5); no = 5 - yes
    day = rng.randrange(1, 28); month = rng.choice(MONTHS)
    kinds = [
        ("proposal", rng.choice([
            f"{who} proposes capping the {t} at {amt} euros.",
            f"{who} tables a motion to set the {t} at {amt} euros for the coming year.",
            f"{who} suggests the {t} be limited to {amt} euros."]), [t, amt]),
        ("objection", rng.choice([
            f"{other} objects to the {t}, arguing that it would overrun within a year.",
            f"{other} argues against the {t} on the grounds that the cost estimates are unreliable.",
            f"{other} voices strong opposition to the {t} because residents were not consulted."]), [t, other.lower()]),
        ("change", rng.choice([
            f"{who} revises the figure for the {t} to {amt2} euros after the discussion.",
            f"Following the objections, {who} lowers the request for the {t} to {amt2} euros.",
            f"{who} amends the proposal so that the {t} comes to {amt2} euros."]), [t, amt2]),
        ("vote", rng.choice([
            f"The committee votes {yes}-{no} to adopt the {t}.",
            f"Members approve the {t} by {yes} votes to {no}.",
            f"The {t} is carried {yes} to {no}."]), [t, f"{yes}"]),
        ("deadline", rng.choice([
            f"The clerk is asked to publish the tender for the {t} by {day} {month}.",
            f"{who} undertakes to report back on the {t} no later than {day} {month}.",
            f"A final decision on the {t} is due on {day} {month}."]), [t, f"{day} {month}"]),
    ]
    for k, (kind, sent, keys) in enumerate(kinds):
        r, s = slot(at[k], at[k] + R // 10 + 1)
        planted[r][s].append(sent)
        facts.append({"kind": kind, "sentence": sent, "keys": keys, "round": r + 1})

PLACES = ["Vertanfen", "Ostbrook", "Kalimera", "Bruxton", "Sellwood", "Mirabel", "Quenby", "Hartle"]
for d in range(40):
    r, s = slot(0, R)
    p = PLACES[d % 8] + ["", "er", "ia", "ton", "by"][d // 8]  # a name of its own
    who = rng.choice(SPEAKERS); n = rng.randrange(3, 60)
    sent = rng.choice([
        f"{who} mentions paying {n} euros for lunch at the {p} cafe.",
        f"{who} reports that the {p} choir voted {rng.randrange(3,9)} to {rng.randrange(0,3)} to sing on Sunday.",
        f"{who} notes that the {p} bakery now sells {n} kinds of bread.",
        f"{who} complains that the {p} room was cold on {rng.randrange(1,28)} {rng.choice(MONTHS)}."])
    planted[r][s].append(sent)
    decoys.append({"kind": "decoy", "sentence": sent, "keys": [p.lower()], "round": r + 1})

pos = rng.randrange(len(turns))
with open(f"{out}/debate.jsonl", "w") as f:
    for r in range(R):
        order = list(range(5)); rng.shuffle(order)
        for s in order:
            k = rng.randint(1, 3)
            parts = []
            for _ in range(k):
                parts.append(turns[pos % len(turns)]); pos += 1
            for p in planted[r][s]:
                parts.insert(rng.randint(0, len(parts)), p)
            f.write(json.dumps({"round": r + 1, "speaker": SPEAKERS[s], "text": " ".join(parts)}) + "\n")
json.dump({"facts": facts, "decoys": decoys}, open(f"{out}/facts.json", "w"), indent=1)
