#!/usr/bin/env python3
"""Fit the salience weights of strata's offline compressor and `auto` overview on public
labelled data (issue 21: "a small model fitted on public labelled data and judged on a
split it never saw").

Data: QMSum's `train` split (real meetings with a human summary of each; never used to
judge anything). Each meeting's sentences get the features strata computes
(`cargo run --release -p strata-core --example salience_features`: the same
`text::salience::features_of` over the whole meeting, each turn a passage), and a label:
whether the sentence is in the meeting's extractive oracle (greedy: the sentence that most
raises ROUGE-1 + ROUGE-2 F1 of the chosen set against the human summary, until none does;
rouge-score's stemmed tokens). A logistic regression (L2, Newton's method, features
standardised on train) is fitted to those labels, meetings weighted equally.

It then simulates the overview's greedy choice (salience per token^COST_POWER, less the
redundancy with what is chosen; labels cost tokens) on `train` and `val` at each meeting's
summary length and prints ROUGE-1/2 of the hand-set weights against the fitted ones.

Result (2026-11-27, docs/EVAL.md "Tried for the `auto` window, not kept"): the fitted
weights did not beat the hand-set ones on `val`, so `salience.rs` keeps `salience-v5`; the
script stays as the record of how that was measured. Adopting fitted weights would mean
writing them into `crates/strata-core/src/text/salience.rs` under a new VERSION and
measuring with `scripts/qmsum.sh` (val), `test` once at the end.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-qmsum.sh | tail -n1)
    cargo build --release -p strata-core --example salience_features
    $PY scripts/qmsum/fit_salience.py --data "$DATA"
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qmsum_eval as q  # noqa: E402
from rouge_score import rouge_scorer  # noqa: E402

WITH_POSITION = False
SCORER = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
TOK = SCORER._tokenizer

# The features a model may use, from the example's JSON (named as in text::salience).
NAMES = ["centrality", "information", "thread", "specificity", "question", "thin", "length"]
POSITION = ["position", "opening"]


def load(data: str, split: str) -> list[q.Meeting]:
    d = os.path.join(data, split)
    out = []
    for f in sorted(os.listdir(d)):
        if f.endswith(".json"):
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                out.append(q.Meeting(f[:-5], json.load(fh), 20))
    return out


def features(example: str, meetings: list[q.Meeting]) -> list[list[dict]]:
    inp = "".join(json.dumps({"id": m.name, "turns": [x for _, x in m.turns]}) + "\n" for m in meetings)
    p = subprocess.run([example], input=inp.encode(), capture_output=True, check=True)
    rows = [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]
    assert [r["id"] for r in rows] == [m.name for m in meetings]
    return [r["sentences"] for r in rows]


def vector(s: dict, turns: int = 0) -> list[float]:
    f = s["features"]
    extra = []
    if WITH_POSITION:
        r = s["turn"] / max(1, turns)
        extra = [r, 1.0 if r < 0.1 else 0.0]
    thin = f["little"] or (f["content"] < 4 and not f["figures"])
    return [
        math.log1p(f["centrality"]),
        math.log1p(f["information"]),
        math.log1p(f["thread"]),
        f["specificity"],
        1.0 if f["question"] else 0.0,
        1.0 if thin else 0.0,
        math.log(max(1, s["tokens"])),
    ] + extra


def hand_score(x: list[float]) -> float:
    """salience-v5: the hand-set weights."""
    c, i, t, sp, qu, th = x[:6]
    return 1.0 * c + 0.5 * i + 1.0 * t + 0.8 * sp - 1.0 * qu - 4.0 * th


def ngrams(toks: list[str], n: int) -> Counter:
    return Counter(tuple(toks[k : k + n]) for k in range(len(toks) - n + 1))


def f1(overlap: int, got: int, want: int) -> float:
    if overlap == 0:
        return 0.0
    p, r = overlap / got, overlap / want
    return 2 * p * r / (p + r)


def oracle(m: q.Meeting, sents: list[dict]) -> set[int]:
    ref = TOK.tokenize(m.summary)
    r1, r2 = ngrams(ref, 1), ngrams(ref, 2)
    toks = [TOK.tokenize(m.turns[s["turn"]][1][s["start"] : s["end"]]) for s in sents]
    g1 = [ngrams(t, 1) for t in toks]
    g2 = [ngrams(t, 2) for t in toks]
    chosen: list[int] = []
    c1, c2 = Counter(), Counter()
    best = 0.0
    cand = [k for k in range(len(sents)) if (g1[k] & r1)]
    while True:
        top, topk = best, None
        for k in cand:
            if k in chosen:
                continue
            n1, n2 = c1 + g1[k], c2 + g2[k]
            v = f1(sum((n1 & r1).values()), sum(n1.values()), sum(r1.values())) + f1(
                sum((n2 & r2).values()), max(1, sum(n2.values())), max(1, sum(r2.values()))
            )
            if v > top:
                top, topk = v, k
        if topk is None:
            return set(chosen)
        chosen.append(topk)
        c1, c2, best = c1 + g1[topk], c2 + g2[topk], top


def cosine(a: dict, b: dict) -> float:
    dot = sum(v * b.get(t, 0) for t, v in a.items())
    if dot == 0:
        return 0.0
    return dot / (math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values())))


def simulate(m: q.Meeting, sents: list[dict], scores: list[float], budget: int, power: float, redundancy: float) -> str:
    """The overview's greedy choice (context/overview.rs), approximately: labels cost 8
    tokens per turn, the header 9."""
    used = 9
    order = sorted((k for k in range(len(sents)) if scores[k] > 0), key=lambda k: -scores[k] / max(1.0, (sents[k]["end"] - sents[k]["start"]) / 4) ** power)
    picked: list[int] = []
    seen_units = set()
    turns_used = set()
    # Lazy greedy without a heap: re-score the head against what is chosen.
    pool = order[:400]
    while pool:
        best, bk = None, None
        for k in pool:
            red = max((cosine(sents[k]["terms"], sents[p]["terms"]) for p in picked), default=0.0)
            v = (scores[k] - redundancy * red) / max(1.0, (sents[k]["end"] - sents[k]["start"]) / 4) ** power
            if scores[k] - redundancy * red <= 0:
                continue
            if best is None or v > best:
                best, bk = v, k
        if bk is None:
            break
        pool.remove(bk)
        s = sents[bk]
        if s["unit"] in seen_units:
            continue
        cost = s["tokens"] + (1 if s["turn"] in turns_used else 8)
        if used + cost > budget:
            continue
        used += cost
        seen_units.add(s["unit"])
        turns_used.add(s["turn"])
        picked.append(bk)
    picked.sort(key=lambda k: (sents[k]["turn"], sents[k]["start"]))
    return " ".join(m.turns[sents[k]["turn"]][1][sents[k]["start"] : sents[k]["end"]] for k in picked)


def fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float) -> np.ndarray:
    """Weighted L2 logistic regression by Newton's method; returns [bias, weights...]."""
    A = np.hstack([np.ones((X.shape[0], 1)), X])
    beta = np.zeros(A.shape[1])
    reg = l2 * np.eye(A.shape[1])
    reg[0, 0] = 0
    for _ in range(50):
        p = 1 / (1 + np.exp(-A @ beta))
        g = A.T @ (w * (p - y)) + reg @ beta
        H = (A * (w * p * (1 - p))[:, None]).T @ A + reg
        step = np.linalg.solve(H, g)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def evaluate(ms, feats, scorefn, power, redundancy) -> tuple[float, float]:
    r1 = r2 = 0.0
    for m, sents in zip(ms, feats):
        xs = [vector(s, len(m.turns)) for s in sents]
        scores = scorefn(xs)
        text = simulate(m, sents, scores, q.ntok(m.summary), power, redundancy)
        s = SCORER.score(m.summary, text)
        r1 += s["rouge1"].fmeasure
        r2 += s["rouge2"].fmeasure
    return 100 * r1 / len(ms), 100 * r2 / len(ms)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--example", default="target/release/examples/salience_features")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--out", default="target/qmsum-work/salience-fit.json")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--with-position", action="store_true", help="also the turn's relative position (a property of meetings)")
    a = ap.parse_args()
    global WITH_POSITION
    WITH_POSITION = a.with_position
    names = NAMES + (POSITION if a.with_position else [])
    q.ENC, _ = q.load_cl100k()
    train, val = load(a.data, "train"), load(a.data, "val")
    if a.limit:
        train, val = train[: a.limit], val[: a.limit]
    ftrain, fval = features(a.example, train), features(a.example, val)
    print(f"train {len(train)} meetings, {sum(map(len, ftrain))} sentences; val {len(val)}", file=sys.stderr)
    X, y, w = [], [], []
    pos = 0
    for m, sents in zip(train, ftrain):
        gold = oracle(m, sents)
        pos += len(gold)
        for k, s in enumerate(sents):
            X.append(vector(s, len(m.turns)))
            y.append(1.0 if k in gold else 0.0)
            w.append(1.0 / len(sents))
    X, y, w = np.array(X), np.array(y), np.array(w)
    w *= len(w) / w.sum()
    mu, sd = X.mean(0), X.std(0) + 1e-12
    beta = fit((X - mu) / sd, y, w, a.l2)
    # Back to raw features: z = b + sum(wk * (xk - mu_k) / sd_k).
    raw = beta[1:] / sd
    bias = beta[0] - (raw * mu).sum()
    print(f"oracle positives {pos} ({pos / len(y):.3%})", file=sys.stderr)
    for n, v, s in zip(names, raw, beta[1:]):
        print(f"  {n:12s} {v:+.4f}  (standardised {s:+.3f})", file=sys.stderr)
    print(f"  bias         {bias:+.4f}", file=sys.stderr)

    def fitted(xs):
        z = np.array(xs) @ raw + bias
        p = 1 / (1 + np.exp(-z))
        return list(p / p.mean())

    def hand(xs):
        return [hand_score(x) for x in xs]

    res = {"weights": dict(zip(names, raw.tolist())), "bias": bias, "mu": mu.tolist(), "sd": sd.tolist()}
    for power in (0.0, 0.25, 0.5):
        for red in (0.7,):
            for name, fn in (("hand", hand), ("fitted", fitted)):
                t = evaluate(train[:40], ftrain[:40], fn, power, red)
                v = evaluate(val, fval, fn, power, red)
                print(f"{name:7s} power {power} red {red}: train40 R1 {t[0]:.2f} R2 {t[1]:.2f} | val R1 {v[0]:.2f} R2 {v[1]:.2f}", file=sys.stderr)
                res[f"{name}-{power}-{red}"] = {"train40": t, "val": v}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
