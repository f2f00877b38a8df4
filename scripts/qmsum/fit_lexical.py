#!/usr/bin/env python3
"""Fit a lexical salience model on public labelled data (issue 21: "a small model fitted on
public labelled data and judged on a split it never saw").

Data: QMSum's `train` split (162 real meetings — AMI product design, ICSI research,
Welsh/Canadian parliamentary committees — each with a human summary; never used to judge
anything). Each sentence gets strata's analysed terms (`text::term_counts`, exported by
`cargo run --release -p strata-core --example salience_features`) and a label: whether it
is in the meeting's extractive oracle against the human summary (`fit_salience.oracle`).

The model: L2 logistic regression over the *presence* of each term, meetings weighted
equally. Its vocabulary is restricted to terms that occur in at least MIN_MEETINGS
meetings of *each* of the three kinds of meeting, so that no domain's topic words ("remote",
"button", "ministers") are learnt as salient: what remains is how people say things that
matter in any meeting (deciding, proposing, costing, agreeing), not what one kind of
meeting is about (`--consensus`: one model per kind, a term keeping the smallest of its
three weights when all agree in sign). The weights are written to `--out` (term, weight),
and the overview's greedy choice is simulated on `train` (first 40) and `val` (and per kind
of meeting) with the lexical score added at several scales.

Result (2026-11-27, docs/EVAL.md "A lexical model fitted on QMSum train: not kept"): the
pooled fit's gains on `val` came from product-design words; the consensus fit raised
`val` a little in every kind of meeting but lowered the key facts an `auto` window keeps of
our generated debates, so nothing was adopted; the script is the record of how it was
measured.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-qmsum.sh | tail -n1)
    $PY -m pip install scikit-learn scipy
    cargo build --release -p strata-core --example salience_features
    $PY scripts/qmsum/fit_lexical.py --data "$DATA"
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import sys

import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_salience as fs  # noqa: E402
import qmsum_eval as q  # noqa: E402

MIN_MEETINGS = 5


def domain(name: str) -> str:
    if name.startswith(("ES", "IS", "TS")):
        return "ami"
    if name.startswith("B"):
        return "icsi"
    return "committee"


def current(s: dict) -> float:
    """The overview's score today: salience-v5 and recurring phrases (PHRASE_WEIGHT 2)."""
    f = s["features"]
    x = fs.vector(s)
    thin = f["little"] or (f["content"] < 4 and not f["figures"])
    v = fs.hand_score(x)
    if not thin:
        v += 2.0 * math.log1p(s["phrases"])
    return v


def cached(path: str, make):
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    v = make()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(v, f)
    return v


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--example", default="target/release/examples/salience_features")
    ap.add_argument("--work", default="target/qmsum-work")
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--out", default="target/qmsum-work/lexicon.tsv")
    ap.add_argument("--scales", default="0,0.5,1,2,3")
    ap.add_argument("--consensus", action="store_true", help="one model per kind of meeting; keep what all three agree on")
    a = ap.parse_args()
    q.ENC, _ = q.load_cl100k()
    train, val = fs.load(a.data, "train"), fs.load(a.data, "val")
    ftrain = cached(os.path.join(a.work, "lex-ftrain.pkl"), lambda: fs.features(a.example, train))
    fval = cached(os.path.join(a.work, "lex-fval.pkl"), lambda: fs.features(a.example, val))
    gold = cached(os.path.join(a.work, "lex-oracle.pkl"), lambda: [fs.oracle(m, s) for m, s in zip(train, ftrain)])
    # Vocabulary: terms in >= MIN_MEETINGS meetings of every kind.
    seen: dict[str, dict[str, int]] = {}
    for m, sents in zip(train, ftrain):
        terms = {t for s in sents for t in s["terms"]}
        for t in terms:
            seen.setdefault(t, {}).setdefault(domain(m.name), 0)
            seen[t][domain(m.name)] += 1
    vocab = sorted(t for t, d in seen.items() if all(d.get(k, 0) >= MIN_MEETINGS for k in ("ami", "icsi", "committee")))
    col = {t: i for i, t in enumerate(vocab)}
    print(f"train {len(train)} meetings, vocabulary {len(vocab)} terms (of {len(seen)})", file=sys.stderr)
    # Every kind of meeting weighs the same in the fit (AMI's are 97 of the 162), each
    # meeting the same within its kind.
    kinds: dict[str, int] = {}
    for m in train:
        kinds[domain(m.name)] = kinds.get(domain(m.name), 0) + 1
    rows, cols, y, w = [], [], [], []
    r = 0
    for m, sents, g in zip(train, ftrain, gold):
        for k, s in enumerate(sents):
            for t in s["terms"]:
                if t in col:
                    rows.append(r)
                    cols.append(col[t])
            y.append(1 if k in g else 0)
            w.append(1.0 / len(sents) / kinds[domain(m.name)])
            r += 1
    X = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(r, len(vocab)))
    w = np.array(w) * r / sum(w)
    y = np.array(y)
    if a.consensus:
        # One model per kind of meeting; a term keeps the smallest of its three weights
        # when all three agree in sign, else none: what holds in every kind of meeting.
        dom = np.array([domain(m.name) for m, sents in zip(train, ftrain) for _ in sents])
        fits = []
        for k in ("ami", "icsi", "committee"):
            sel = dom == k
            lr = LogisticRegression(C=a.C, max_iter=2000)
            lr.fit(X[sel], y[sel], sample_weight=w[sel])
            fits.append(lr.coef_[0])
        F = np.array(fits)
        agree = (np.sign(F) == np.sign(F[0])).all(0)
        coef = np.where(agree, np.sign(F[0]) * np.abs(F).min(0), 0.0)
    else:
        lr = LogisticRegression(C=a.C, max_iter=2000)
        lr.fit(X, y, sample_weight=w)
        coef = lr.coef_[0]
    order = np.argsort(coef)
    print("most negative:", ", ".join(f"{vocab[i]} {coef[i]:+.2f}" for i in order[:25]), file=sys.stderr)
    print("most positive:", ", ".join(f"{vocab[i]} {coef[i]:+.2f}" for i in order[::-1][:40]), file=sys.stderr)
    weight = {t: float(c) for t, c in zip(vocab, coef)}

    def lex(s):
        return sum(weight.get(t, 0.0) for t in s["terms"])

    for scale in [float(x) for x in a.scales.split(",")]:
        def fn(sents, scale=scale):
            return [current(s) + scale * lex(s) for s in sents]

        res = []
        sets = [(train[:40], ftrain[:40]), (val, fval)]
        for k in ("ami", "icsi", "committee"):
            sets.append(([m for m in val if domain(m.name) == k], [f for m, f in zip(val, fval) if domain(m.name) == k]))
        for ms, ff in sets:
            r1 = r2 = 0.0
            for m, sents in zip(ms, ff):
                text = fs.simulate(m, sents, fn(sents), q.ntok(m.summary), 0.25, 0.7)
                sc = fs.SCORER.score(m.summary, text)
                r1 += sc["rouge1"].fmeasure
                r2 += sc["rouge2"].fmeasure
            res.append((100 * r1 / len(ms), 100 * r2 / len(ms)))
        print(
            f"scale {scale}: train40 R1 {res[0][0]:.2f} R2 {res[0][1]:.2f} | val R1 {res[1][0]:.2f} R2 {res[1][1]:.2f}"
            f" | val AMI {res[2][0]:.2f}/{res[2][1]:.2f} ICSI {res[3][0]:.2f}/{res[3][1]:.2f} committees {res[4][0]:.2f}/{res[4][1]:.2f}",
            file=sys.stderr,
        )
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(f"# lexicon: fitted by scripts/qmsum/fit_lexical.py on QMSum train (commit 83d7768), C={a.C}, min meetings per kind {MIN_MEETINGS}\n")
        for t in vocab:
            if abs(weight[t]) >= 0.01:
                f.write(f"{t}\t{weight[t]:.4f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
