#!/usr/bin/env python3
"""QMSum evaluation of `strata query`'s citations (issue 21: set answers, "not found").

Each QMSum specific query has gold relevant turn spans (human-labelled). `strata query`
answers with citations to byte spans of the meeting's turns (`M.jsonl#LINE`); a citation
counts as gold when its turn is in a gold span. Per query:

- hit: some citation is in a gold turn;
- precision: the share of cited turns (distinct) that are gold;
- recall: the share of gold *spans* (the query's `relevant_text_span` ranges) with a cited
  turn — a span is one passage that answers; citing each passage once is full recall;
- cited: the number of distinct cited turns; ready: whether the answer is ready.

`strata_first` scores the first citation alone (the answer's primary evidence).

Reported beside it, the same counts for the top k turns of BM25 over turns (rank-bm25's
BM25Okapi, the analyser of qmsum_eval.py), k = 1 and 3: what a plain turn retriever cites.

Unanswerable questions (`--negatives`): each meeting is also asked the specific queries of
the meeting half the list away (sorted by name: another meeting, most often of another
kind — a parliamentary committee asked about a remote control's buttons). Nothing in the
meeting answers them; a query should end not ready. Reported: the share of answerable and of
unanswerable queries that end ready, and the AUC of `confidence` separating them (0.5 =
no separation).

False premises (`--swapped`): a specific query that names exactly one speaker of its meeting
(their whole name, as the transcript writes it, e.g. "What did Grad E say about storage
disks?") is asked again with that name replaced by the speaker with the most turns of those
who have no turn in the query's gold spans (and at least 10 turns in the meeting): someone
who took part in the meeting but not in the discussion the question is about. The topic is
the meeting's own; only who is said to have spoken is false — the hard kind of false
premise, about the conversation's own people and topics. Reported: the share that end ready
(against the same queries unswapped), and the AUC of `confidence` between the original and
the swapped questions.

Meetings are loaded as qmsum_eval.py loads them (the same debate files and scopes), into
WORKDIR/db; a meeting already in that store (same scope) is reused. Develop on `val`.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-qmsum.sh | tail -n1)
    $PY scripts/qmsum/qmsum_query.py --data "$DATA" --split val --strata target/debug/strata
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qmsum_eval as qe  # noqa: E402


def meeting(split_dir: str, fname: str, turns_per_round: int) -> qe.Meeting:
    """The meeting of `split_dir/fname`, each specific query with its gold spans (`spans`)."""
    with open(os.path.join(split_dir, fname), encoding="utf-8") as f:
        data = json.load(f)
    m = qe.Meeting(fname[: -len(".json")], data, turns_per_round)
    for q, raw in zip(m.queries, data["specific_query_list"]):
        q["spans"] = raw["relevant_text_span"]
    return m


def spans_of(q: dict, m: qe.Meeting) -> list[set[int]]:
    return [set(range(int(a), int(b) + 1)) & set(m.live) for a, b in q["spans"]]


TITLES = {"AM", "MP", "MS", "Dr", "Hon", "Right", "The", "Mr", "Mrs", "Ms", "Chair", "Acting"}


def name_forms(speaker: str) -> list[str]:
    """How a question may name `speaker`: the whole name as the transcript writes it, the
    name without titles ("Kirsty Williams" for "Kirsty Williams AM", "Bill Morneau" for
    "Hon. Bill Morneau"), and for a personal name of two words or more its last word
    ("Morneau"). Longest first."""
    words = [w for w in speaker.split("(")[0].split() if w.rstrip(".") not in TITLES]
    forms = [speaker, " ".join(words)]
    if len(words) >= 2 and len(speaker.split()) > len(words) and len(words[-1]) >= 4:
        forms.append(words[-1])
    return sorted({f for f in forms if f}, key=len, reverse=True)


def swap_speaker(q: dict, m: qe.Meeting, min_turns: int = 10) -> str | None:
    """`q`'s question with the one speaker it names replaced by a speaker of the meeting who
    has no turn in its gold spans (the one with most turns, at least `min_turns`), named the
    same way (whole name, name without titles, last word), or None when it names no speaker,
    more than one, or no such speaker exists."""
    import re

    text = q["query"]
    found: dict[str, tuple[int, str]] = {}
    for s in m.speakers:
        for k, form in enumerate(name_forms(s)):
            if re.search(r"\b" + re.escape(form) + r"\b", text):
                found[s] = (k, form)
                break
    # A name inside another name ("PhD A" in "PhD AB") is not a second speaker.
    named = [s for s in found if not any(s != o and found[s][1] in found[o][1] for o in found)]
    if len(named) != 1:
        return None
    x = named[0]
    turns: dict[str, int] = {}
    for s, t in m.turns:
        if t:
            turns[s] = turns.get(s, 0) + 1
    in_gold = {m.turns[i][0] for i in q["gold"]}
    others = [s for s in m.speakers if s != x and s not in in_gold and turns.get(s, 0) >= min_turns]
    if not others:
        return None
    z = max(others, key=lambda s: (turns[s], s))
    form = found[x][1]
    xs, zs = name_forms(x), name_forms(z)
    # The same kind of name: whole, without titles, or last word.
    if form == x:
        zf = z
    elif form == xs[-1] and len(xs) == 3 and len(zs) == 3:
        zf = zs[-1]
    else:
        zf = " ".join(w for w in z.split("(")[0].split() if w.rstrip(".") not in TITLES) or z
    return re.sub(r"\b" + re.escape(form) + r"\b", zf, text)


def auc(pos: list[float], neg: list[float]) -> float | None:
    """P(a positive's confidence > a negative's), ties counting half; None when either is empty."""
    if not pos or not neg:
        return None
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def scores(cited: list[int], spans: list[set[int]], gold: set[int]) -> dict:
    cited = list(dict.fromkeys(cited))
    good = [i for i in cited if i in gold]
    live = [s for s in spans if s]
    return {
        "hit": bool(good),
        "precision": (len(good) / len(cited)) if cited else None,
        "recall": (sum(1 for s in live if s & set(cited)) / len(live)) if live else None,
        "cited": len(cited),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", choices=["val", "test", "train"], default="val")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--strata", default="target/debug/strata")
    ap.add_argument("--workdir", default="target/qmsum-query")
    ap.add_argument("--out")
    ap.add_argument("--turns-per-round", type=int, default=20)
    ap.add_argument("--negatives", action="store_true", help="also ask each meeting another meeting's queries")
    ap.add_argument("--swapped", action="store_true", help="also ask each query naming a speaker with another speaker named")
    a = ap.parse_args()
    qe.ENC, _ = qe.load_cl100k()
    split_dir = os.path.join(a.data, a.split)
    names = sorted(n for n in os.listdir(split_dir) if n.endswith(".json"))
    if a.limit:
        names = names[: a.limit]
    strata = qe.Strata(a.strata, a.workdir)
    try:
        known = {s["scope"] for s in json.loads(strata.run("--json", "stats")).get("scopes", [])}
    except (RuntimeError, ValueError, AttributeError):
        known = set()
    rows = []
    negatives = []
    swapped = []
    t0 = time.time()
    foreign = {}
    if a.negatives:
        for mi, fname in enumerate(names):
            other = names[(mi + len(names) // 2) % len(names)]
            with open(os.path.join(split_dir, other), encoding="utf-8") as f:
                foreign[fname] = [q["query"] for q in json.load(f)["specific_query_list"]]
    # Every meeting is in the store before any is asked: retrieval weighs words by the
    # whole store's statistics, so a meeting asked while later ones were still missing
    # read differently from the same meeting asked in a later run over the full store.
    for fname in names:
        name = fname[: -len(".json")]
        if name not in known:
            with open(os.path.join(split_dir, fname), encoding="utf-8") as f:
                strata.load(qe.Meeting(name, json.load(f), a.turns_per_round))
    for mi, fname in enumerate(names):
        m = meeting(split_dir, fname, a.turns_per_round)
        asked: dict[str, dict] = {}
        name = m.name
        idx = qe.TurnIndex(m)
        for q in m.queries:
            spans = spans_of(q, m)
            gold = set(q["gold"])
            if not gold:
                continue
            out = strata.run("--json", "query", "--scope", name, q["query"])
            r = json.loads(out)
            asked[q["query"]] = r
            cited = []
            for c in r.get("citations", []):
                i = m.turn_of_source(str(c.get("source", "")))
                if i is not None:
                    cited.append(i)
            bm = idx.bm25.get_scores(qe.analyse(q["query"]))
            order = [m.live[k] for k in sorted(range(len(bm)), key=lambda k: (-bm[k], k)) if bm[k] > 0]
            rows.append(
                {
                    "meeting": name,
                    "query": q["query"],
                    "gold_spans": len([s for s in spans if s]),
                    "ready": bool(r.get("ready")),
                    "confidence": r.get("confidence"),
                    "strata": scores(cited, spans, gold),
                    "strata_first": scores(cited[:1], spans, gold),
                    "cited_turns": cited,
                    "bm25_top1": scores(order[:1], spans, gold),
                    "bm25_top3": scores(order[:3], spans, gold),
                }
            )
        if a.swapped:
            for q in m.queries:
                sq = swap_speaker(q, m)
                if sq is None:
                    continue
                o = asked.get(q["query"]) or json.loads(strata.run("--json", "query", "--scope", name, q["query"]))
                r = json.loads(strata.run("--json", "query", "--scope", name, sq))
                swapped.append(
                    {
                        "meeting": name,
                        "query": q["query"],
                        "swapped": sq,
                        "ready": bool(o.get("ready")),
                        "confidence": o.get("confidence"),
                        "swapped_ready": bool(r.get("ready")),
                        "swapped_confidence": r.get("confidence"),
                    }
                )
        for fq in foreign.get(fname, []):
            r = json.loads(strata.run("--json", "query", "--scope", name, fq))
            negatives.append({"meeting": name, "query": fq, "ready": bool(r.get("ready")), "confidence": r.get("confidence")})
        print(f"qmsum-query: [{mi + 1}/{len(names)}] {name}: {len(m.queries)} queries", file=sys.stderr)

    def mean(key, meth):
        xs = [r[meth][key] for r in rows if r[meth][key] is not None]
        return sum(float(x) for x in xs) / len(xs) if xs else float("nan")

    summary = {
        meth: {k: mean(k, meth) for k in ["hit", "precision", "recall", "cited"]}
        for meth in ["strata", "strata_first", "bm25_top1", "bm25_top3"]
    }
    summary["strata"]["ready"] = sum(r["ready"] for r in rows) / max(1, len(rows))
    res = {"split": a.split, "queries": len(rows), "seconds": round(time.time() - t0, 1), "summary": summary, "rows": rows}
    if negatives:
        pos = [float(r["confidence"] or 0.0) for r in rows]
        neg = [float(r["confidence"] or 0.0) for r in negatives]
        res["negatives"] = {
            "queries": len(negatives),
            "ready": sum(r["ready"] for r in negatives) / len(negatives),
            "auc": auc(pos, neg),
            "rows": negatives,
        }
    if swapped:
        pos = [float(r["confidence"] or 0.0) for r in swapped]
        neg = [float(r["swapped_confidence"] or 0.0) for r in swapped]
        res["swapped"] = {
            "queries": len(swapped),
            "original_ready": sum(r["ready"] for r in swapped) / len(swapped),
            "swapped_ready": sum(r["swapped_ready"] for r in swapped) / len(swapped),
            "auc": auc(pos, neg),
            "lower": sum(n < p for p, n in zip(pos, neg)) / len(swapped),
            "rows": swapped,
        }
    out = a.out or os.path.join(a.workdir, f"query-{a.split}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(f"QMSum {a.split}: {len(rows)} specific queries ({res['seconds']} s)")
    print("| method | hit | precision | recall (gold spans) | turns cited |")
    print("|---|---|---|---|---|")
    for meth, s in summary.items():
        print(
            f"| {meth} | {100 * s['hit']:.1f} % | {100 * s['precision']:.1f} % | "
            f"{100 * s['recall']:.1f} % | {s['cited']:.2f} |"
        )
    print(f"strata ready: {100 * summary['strata']['ready']:.1f} % of answerable queries")
    if negatives:
        n = res["negatives"]
        print(f"unanswerable (another meeting's queries): {n['queries']}, ready {100 * n['ready']:.1f} %, confidence AUC {n['auc']:.3f}")
    if swapped:
        n = res["swapped"]
        print(
            f"false premises (the named speaker swapped): {n['queries']}, ready {100 * n['swapped_ready']:.1f} % "
            f"(the same queries unswapped: {100 * n['original_ready']:.1f} %), confidence AUC {n['auc']:.3f}, "
            f"lower than the original's {100 * n['lower']:.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
