#!/usr/bin/env python3
"""QMSum: the turn ranking's hand-set weights against fitted ones (docs/EVAL.md).

`context --for` and `query` rank a conversation's turns for a question by features of
each turn (its BM25 share, what nearby hits lend it, the question it replies to) with
constants set by hand (`corpus/turns.rs`: NEIGHBOUR, SPREAD, REPLY, EVIDENCE_FLOOR). Two
ways of fitting them instead, each fitted on one part of the meetings and judged on
another: (1) a logistic regression, one row per (specific query, turn), the label whether
the turn is in the query's gold spans, each query weighing the same (over every turn, or
over the turns with evidence of their own); (2) the engine's own two-pass order simulated
for a grid of the four constants, the best on the fitting part by hit at 1–3 turns. The
features come from strata itself (`--json context --for=Q` with a budget larger than the
meeting: every turn with its `why`), so what is fitted is what the engine computes.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-qmsum.sh | tail -n1)
    $PY scripts/qmsum/qmsum_query.py --data "$DATA" --split val --strata BIN --workdir WV
    $PY scripts/qmsum/fit_turns.py --data "$DATA" --strata BIN --val WV [--train WT]

Without --train, `val`'s meetings are split in two (alternate meetings by name) and each
half judges what the other fitted; with --train (a `qmsum_query.py` workdir of `train`),
`train` fits and `val` judges. Prints, for each, the first k distinct turns of the ranking
scored as `qmsum_query.py` scores citations (hit at k = 1, 2, 3).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qmsum_eval as qe  # noqa: E402
import qmsum_query as qq  # noqa: E402

REPLY = 0.6  # corpus/turns.rs: what a reply takes of the question's score


def dump(data: str, split: str, strata: qe.Strata) -> list[dict]:
    """Every (query, turn) of `split` with the engine's features, cached in the workdir."""
    cache = os.path.join(os.path.dirname(strata.db), f"turns-{split}.json")
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            return json.load(f)
    out = []
    split_dir = os.path.join(data, split)
    names = sorted(n for n in os.listdir(split_dir) if n.endswith(".json"))
    for k, fname in enumerate(names):
        m = qq.meeting(split_dir, fname, 20)
        name = m.name
        print(f"fit-turns: [{k + 1}/{len(names)}] {name}", file=sys.stderr)
        for q in m.queries:
            gold = set(q["gold"])
            if not gold:
                continue
            w = strata.window(m, 400_000, question=q["query"])
            turns: dict[int, dict] = {}
            for n in w["nodes"]:
                if n.get("level") != "full" or "why" not in n:
                    continue
                for s in n["spans"]:
                    t = m.turn_of_source(s["source"])
                    if t is not None and t not in turns:
                        turns[t] = {"why": n["why"], "tokens": n["tokens"]}
            out.append(
                {
                    "meeting": name,
                    "query": q["query"],
                    "gold": sorted(gold),
                    "spans": [sorted(s) for s in qq.spans_of(q, m)],
                    "live": m.live,
                    "turns": {str(t): v for t, v in turns.items()},
                }
            )
    with open(cache, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return out


NAMES = [
    "hit",
    "hit_sq",
    "nb1",
    "nb3",
    "nb6",
    "nb15",
    "reply",
    "named",
    "named_hit",
    "log_tokens",
    "short",
    "is_hit",
]


def features(q: dict) -> tuple[list[int], np.ndarray]:
    """The turns of one query in reading order and their feature rows."""
    live = q["live"]
    tv = q["turns"]
    hit = np.array([tv.get(str(t), {}).get("why", {}).get("retrieval", 0.0) for t in live])
    n = len(live)
    pos = np.arange(n)
    rows = []
    nbs = {}
    for s in (1, 3, 6, 15):
        d = np.abs(pos[:, None] - pos[None, :])
        k = np.exp(-d / s)
        np.fill_diagonal(k, 0.0)
        nbs[s] = k @ hit
    for i, t in enumerate(live):
        v = tv.get(str(t), {})
        why = v.get("why", {})
        tokens = max(1, v.get("tokens", 1))
        named = why.get("named_speaker", 0.0)
        rows.append(
            [
                hit[i],
                hit[i] ** 2,
                nbs[1][i],
                nbs[3][i],
                nbs[6][i],
                nbs[15][i],
                why.get("reply_to_question", 0.0) / REPLY,
                named,
                named * hit[i],
                math.log(tokens),
                1.0 if tokens <= 5 else 0.0,
                1.0 if hit[i] > 0 else 0.0,
            ]
        )
    return list(live), np.array(rows)


def fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3, iters: int = 50) -> np.ndarray:
    """Weighted L2 logistic regression by Newton's method; the last weight is the bias."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    beta = np.zeros(Xb.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(Xb @ beta)))
        g = Xb.T @ (w * (p - y)) + l2 * np.r_[beta[:-1], 0.0]
        H = (Xb * (w * p * (1 - p))[:, None]).T @ Xb + l2 * np.diag(np.r_[np.ones(len(beta) - 1), 0.0])
        step = np.linalg.solve(H, g)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def design(qs: list[dict], cols: list[int]):
    Xs, ys, ws = [], [], []
    for q in qs:
        live, X = features(q)
        gold = set(q["gold"])
        y = np.array([1.0 if t in gold else 0.0 for t in live])
        pos = max(1.0, y.sum())
        neg = max(1.0, len(y) - y.sum())
        Xs.append(X[:, cols])
        ys.append(y)
        ws.append(np.where(y > 0, 0.5 / pos, 0.5 / neg))
    return np.vstack(Xs), np.concatenate(ys), np.concatenate(ws)


def judge(qs: list[dict], order_of) -> dict:
    agg: dict[int, list[dict]] = {1: [], 2: [], 3: []}
    for q in qs:
        order = order_of(q)
        spans = [set(s) for s in q["spans"]]
        for k in agg:
            agg[k].append(qq.scores(order[:k], spans, set(q["gold"])))
    res = {}
    for k, rows in agg.items():
        res[k] = 100 * sum(r["hit"] for r in rows) / len(rows)
    return res


def engine_order(q: dict) -> list[int]:
    tv = q["turns"]
    return [int(t) for t, _ in sorted(tv.items(), key=lambda kv: (kv[1]["why"].get("rank", 1e9), int(kv[0])))]


def model_order(beta: np.ndarray, cols: list[int]):
    def order(q: dict) -> list[int]:
        live, X = features(q)
        s = X[:, cols] @ beta[:-1]
        return [live[i] for i in sorted(range(len(live)), key=lambda i: (-s[i], live[i]))]

    return order


def simulated(q: dict, neighbour=1.0, spread=6.0, reply=0.6, floor=0.3) -> list[int]:
    """The engine's order (`corpus::turns::passes`, no named speaker) under other constants."""
    live = q["live"]
    tv = q["turns"]
    hit = np.array([tv.get(str(t), {}).get("why", {}).get("retrieval", 0.0) for t in live])
    asks = np.array([1.0 if tv.get(str(t), {}).get("why", {}).get("reply_to_question", 0.0) > 0 else 0.0 for t in live])
    n = len(live)
    decay = math.exp(-1.0 / spread)
    fwd = np.zeros(n)
    bwd = np.zeros(n)
    for i in range(n):
        fwd[i] = hit[i] + (decay * fwd[i - 1] if i > 0 else 0.0)
    for i in range(n - 1, -1, -1):
        bwd[i] = hit[i] + (decay * bwd[i + 1] if i + 1 < n else 0.0)
    nb = neighbour * (fwd + bwd - 2 * hit)
    rep = reply * np.r_[0.0, hit[:-1]] * asks
    score = hit + np.maximum(nb, rep)
    direct = hit + rep
    first = sorted((i for i in range(n) if direct[i] >= floor), key=lambda i: (-direct[i], live[i]))
    second = sorted(range(n), key=lambda i: (-score[i], live[i]))
    return list(dict.fromkeys(live[i] for i in first + second))


def candidates_design(qs: list[dict], cols: list[int]):
    """Rows of the turns with evidence of their own (a hit or a reply to one)."""
    Xs, ys, ws = [], [], []
    for q in qs:
        live, X = features(q)
        m = (X[:, NAMES.index("is_hit")] > 0) | (X[:, NAMES.index("reply")] > 0)
        gold = set(q["gold"])
        y = np.array([1.0 if t in gold else 0.0 for t in live])[m]
        if not m.any() or y.sum() == 0:
            continue
        Xs.append(X[m][:, cols])
        ys.append(y)
        ws.append(np.full(len(y), 1.0 / len(y)))
    return np.vstack(Xs), np.concatenate(ys), np.concatenate(ws)


def candidates_order(beta: np.ndarray, cols: list[int]):
    def order(q: dict) -> list[int]:
        live, X = features(q)
        m = (X[:, NAMES.index("is_hit")] > 0) | (X[:, NAMES.index("reply")] > 0)
        s = X[:, cols] @ beta[:-1]
        first = [live[i] for i in sorted(np.nonzero(m)[0], key=lambda i: (-s[i], live[i]))]
        return list(dict.fromkeys(first + engine_order(q)))

    return order


def fmt(r: dict) -> str:
    return " / ".join(f"{r[k]:.1f}" for k in (1, 2, 3))


def compare(fit_on: list[dict], judge_on: list[dict], label: str) -> None:
    print(f"\n## fitted on {label[0]} ({len(fit_on)} queries), judged on {label[1]} ({len(judge_on)} queries): hit at 1 / 2 / 3 turns")
    print(f"- the engine (hand-set constants): {fmt(judge(judge_on, engine_order))} %")
    every = list(range(len(NAMES)))
    small = [NAMES.index(n) for n in ("hit", "nb6", "reply")]
    for name, cols in (("every feature", every), ("hit, nb6, reply", small)):
        X, y, w = design(fit_on, cols)
        beta = fit(X, y, w)
        print(f"- logistic regression over every turn, {name}: {fmt(judge(judge_on, model_order(beta, cols)))} %")
        X, y, w = candidates_design(fit_on, cols)
        beta = fit(X, y, w, l2=1e-2)
        print(f"- logistic regression over the turns with evidence, {name}: {fmt(judge(judge_on, candidates_order(beta, cols)))} %")
        print("  weights: " + ", ".join(f"{NAMES[c]} {b:+.2f}" for c, b in zip(cols, beta)))
    grid = list(itertools.product([0.25, 0.5, 1.0, 2.0], [2.0, 6.0, 15.0], [0.3, 0.6, 1.0], [0.2, 0.3, 0.5]))

    def objective(qs, p):
        r = judge(qs, lambda q: simulated(q, *p))
        return (r[1] + r[2] + r[3]) / 3

    best = max(grid, key=lambda p: objective(fit_on, p))
    print(
        f"- the engine's order, constants searched (neighbour, spread, reply, floor) = {best}: "
        f"{fmt(judge(judge_on, lambda q: simulated(q, *best)))} % "
        f"(the hand-set constants simulated: {fmt(judge(judge_on, simulated))} %)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--strata", default="target/release/strata")
    ap.add_argument("--val", required=True, help="qmsum_query.py's workdir for val")
    ap.add_argument("--train", help="qmsum_query.py's workdir for train")
    a = ap.parse_args()
    qe.ENC, _ = qe.load_cl100k()
    va = dump(a.data, "val", qe.Strata(a.strata, a.val))
    if a.train:
        tr = dump(a.data, "train", qe.Strata(a.strata, a.train))
        compare(tr, va, ("train", "val"))
        return 0
    meetings = sorted({q["meeting"] for q in va})
    half = set(meetings[0::2])
    one = [q for q in va if q["meeting"] in half]
    other = [q for q in va if q["meeting"] not in half]
    compare(one, other, ("val, alternate meetings from the first", "the other half"))
    compare(other, one, ("val, alternate meetings from the second", "the first half"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
