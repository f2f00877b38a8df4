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
        name = m.name
        idx = qe.TurnIndex(m)
        for q in m.queries:
            spans = spans_of(q, m)
            gold = set(q["gold"])
            if not gold:
                continue
            out = strata.run("--json", "query", "--scope", name, q["query"])
            r = json.loads(out)
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
        # AUC: P(conf(answerable) > conf(unanswerable)), ties count half.
        wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
        res["negatives"] = {
            "queries": len(negatives),
            "ready": sum(r["ready"] for r in negatives) / len(negatives),
            "auc": wins / (len(pos) * len(neg)) if pos and neg else None,
            "rows": negatives,
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
