#!/usr/bin/env python3
"""QMSum: the question-focused window's turn ranking taken as citations (docs/EVAL.md).

For each specific query, the `--for` window of 2,000 tokens (`strata --json context
--for=Q`) ranks the turns it considered (`why.rank`); its first k distinct turns (k = 1, 2,
3) are scored as `qmsum_query.py` scores `strata query`'s citations (hit, precision, recall of
the gold spans), beside that run's own rows. Run `qmsum_query.py` first with the same
--workdir (its store and its `query-SPLIT.json` are read). Develop on `val`.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-qmsum.sh | tail -n1)
    $PY scripts/qmsum/qmsum_query.py --data "$DATA" --split val --strata target/release/strata --workdir W
    $PY scripts/qmsum/qmsum_for_rank.py --data "$DATA" --split val --strata target/release/strata --workdir W
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qmsum_eval as qe  # noqa: E402
import qmsum_query as qq  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", choices=["val", "test", "train"], default="val")
    ap.add_argument("--strata", default="target/release/strata")
    ap.add_argument("--workdir", default="target/qmsum-query")
    ap.add_argument("--budget", type=int, default=2000)
    a = ap.parse_args()
    qe.ENC, _ = qe.load_cl100k()
    strata = qe.Strata(a.strata, a.workdir)
    with open(os.path.join(a.workdir, f"query-{a.split}.json"), encoding="utf-8") as f:
        res = json.load(f)
    byq = {(r["meeting"], r["query"]): r for r in res["rows"]}
    split_dir = os.path.join(a.data, a.split)
    agg: dict[str, list[dict]] = {}
    for fname in sorted(n for n in os.listdir(split_dir) if n.endswith(".json")):
        m = qq.meeting(split_dir, fname, 20)
        name = m.name
        for q in m.queries:
            gold = set(q["gold"])
            if not gold or (name, q["query"]) not in byq:
                continue
            spans = qq.spans_of(q, m)
            w = strata.window(m, a.budget, question=q["query"])
            parts = []
            for n in w["nodes"]:
                if n.get("level") != "full" or "why" not in n:
                    continue
                for s in n["spans"]:
                    t = m.turn_of_source(s["source"])
                    if t is not None:
                        parts.append((n["why"].get("rank", 1e9), t))
            order = list(dict.fromkeys(t for _, t in sorted(parts, key=lambda p: p[0])))
            for k in (1, 2, 3):
                agg.setdefault(f"for_first{k}", []).append(qq.scores(order[:k], spans, gold))
            r = byq[(name, q["query"])]
            for meth in ("strata", "strata_first", "bm25_top1", "bm25_top3"):
                agg.setdefault(meth, []).append(r[meth])
    print("| turns cited | queries | hit | precision | recall (gold spans) | turns |")
    print("|---|--:|--:|--:|--:|--:|")
    for k, rows in agg.items():
        pr = [r["precision"] for r in rows if r["precision"] is not None]
        rc = [r["recall"] for r in rows if r["recall"] is not None]
        print(
            f"| {k} | {len(rows)} | {100 * sum(r['hit'] for r in rows) / len(rows):.1f} % | "
            f"{100 * sum(pr) / max(1, len(pr)):.1f} % | {100 * sum(rc) / max(1, len(rc)):.1f} % | "
            f"{sum(r['cited'] for r in rows) / len(rows):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
