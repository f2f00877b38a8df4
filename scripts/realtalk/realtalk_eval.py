#!/usr/bin/env python3
"""REALTALK: strata on real long conversations between two people (issue 21).

REALTALK (github.com/danny911kr/REALTALK; fetched by scripts/fetch-realtalk.sh) holds ten
conversations of two people messaging over 16-26 days, every message timed, each with about
70 memory-probing questions whose evidence messages are human-labelled. Nothing in strata
was written for it. The conversations are split by number: odd ones (1, 3, 5, 7, 9) are
`dev`, even ones `test`.

Each conversation is loaded as a debate: one JSON Lines row per message
(`{"round": session, "speaker", "text", "time"}`, the message's own date and time), a
message without text (a photo alone) an empty line. Measured per question:

- question-focused windows (`context --for QUESTION --budget N`): whether the window holds
  some gold message verbatim (any of its bytes inside a `full` part's spans: `any`), and
  whether it holds at least half of one gold message's bytes (`half`); beside it, BM25 over
  messages (rank-bm25, the analyser of qmsum_eval.py) packed whole to the same budget, and
  the unfocused `auto` window;
- `query`: whether a citation is a gold message (hit), the first citation alone, the
  number of messages cited, ready, confidence; beside it BM25's top 1 / 3 / 10 messages;
- unanswerable questions (`--negatives`): each conversation asked the questions of the
  conversation half the list away (other people, other lives): the share that end ready,
  and the AUC of confidence between answerable and unanswerable questions;
- false premises (`--swapped`): a question naming exactly one of the two speakers (by the
  first word of their name as the transcript writes it, any case) asked again with the other
  speaker named: the share that end ready.

    PY=$(scripts/qmsum-venv.sh | tail -n1); DATA=$(scripts/fetch-realtalk.sh | tail -n1)
    $PY scripts/realtalk/realtalk_eval.py --data "$DATA" --split dev --strata target/release/strata
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "qmsum"))
import qmsum_eval as qe  # noqa: E402
from qmsum_query import auc  # noqa: E402

EVIDENCE = re.compile(r"D\d+:\d+")


def rfc3339(stamp: str) -> str | None:
    """"29.12.2023, 22:42:04" -> "2023-12-29T22:42:04Z" (the data gives no time zone)."""
    try:
        t = dt.datetime.strptime(stamp.strip(), "%d.%m.%Y, %H:%M:%S")
    except ValueError:
        return None
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Chat:
    """One conversation, shaped as qmsum_eval.Meeting is (turns, live, line, source_of)."""

    def __init__(self, name: str, data: dict):
        self.name = name
        self.file = f"{name}.jsonl"
        self.turns: list[tuple[str, str]] = []
        self.rows: list[str] = []
        self.line_of_id: dict[str, int] = {}
        sessions = sorted(
            (int(k.split("_")[1]), v) for k, v in data.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)
        )
        for n, msgs in sessions:
            for msg in msgs:
                speaker = " ".join(str(msg.get("speaker", "")).split()) or "Unknown"
                text = " ".join(str(msg.get("clean_text", "")).split())
                i = len(self.turns)
                self.line_of_id.setdefault(str(msg.get("dia_id", "")), i)
                self.turns.append((speaker, text))
                if not text:
                    self.rows.append("")
                    continue
                row = {"round": n, "speaker": speaker, "text": text}
                when = rfc3339(str(msg.get("date_time", "")))
                if when:
                    row["time"] = when
                self.rows.append(json.dumps(row, ensure_ascii=False))
        self.live = [i for i, (_, x) in enumerate(self.turns) if x]
        self.speakers = sorted({s for s, x in self.turns if x})
        self.queries = []
        for q in data.get("qa", []):
            ids = [e for ev in q.get("evidence", []) for e in EVIDENCE.findall(str(ev))]
            gold = sorted({self.line_of_id[e] for e in ids if e in self.line_of_id and self.turns[self.line_of_id[e]][1]})
            if gold:
                self.queries.append({"query": str(q["question"]), "gold": gold, "category": q.get("category")})

    def debate_jsonl(self) -> str:
        return "\n".join(self.rows) + "\n"

    # A message's line and its source as qmsum_eval.Meeting names a turn's.
    line = qe.Meeting.line
    source_of = qe.Meeting.source_of
    turn_of_source = qe.Meeting.turn_of_source


def first_name(speaker: str) -> str:
    return speaker.split()[0]


def swap_speaker(q: str, c: Chat) -> str | None:
    """`q` with the one speaker it names replaced by the other, or None."""
    named = [s for s in c.speakers if re.search(r"\b" + re.escape(first_name(s)) + r"\b", q, re.I)]
    if len(named) != 1 or len(c.speakers) != 2:
        return None
    x = named[0]
    z = next(s for s in c.speakers if s != x)
    zf = first_name(z)
    zf = zf[:1].upper() + zf[1:]
    return re.sub(r"\b" + re.escape(first_name(x)) + r"('s)?\b", lambda m: zf + (m.group(1) or ""), q, flags=re.I)


def held_any_half(window: dict, c: Chat, gold: list[int]) -> tuple[bool, bool]:
    held = qe.held_strict(window, c)
    anyp = half = False
    for i in gold:
        size = len(c.turns[i][1].encode())
        got = qe.covered_bytes(held.get(i, []), size)
        anyp |= got > 0
        half |= size > 0 and got * 2 >= size
    return anyp, half


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", choices=["dev", "test", "all"], default="dev")
    ap.add_argument("--strata", default="target/debug/strata")
    ap.add_argument(
        "--workdir",
        default="target/realtalk",
        help="each split's store goes in WORKDIR/SPLIT: BM25's statistics cover every scope of a store, so a store "
        "shared by the splits would rank each a little differently",
    )
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument("--no-windows", action="store_true")
    ap.add_argument("--negatives", action="store_true")
    ap.add_argument("--swapped", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    qe.ENC, _ = qe.load_cl100k()
    budgets = [int(b) for b in a.budgets.split(",") if b] if not a.no_windows else []
    names = sorted(
        (n for n in os.listdir(a.data) if re.fullmatch(r"Chat_\d+_.*\.json", n)), key=lambda n: int(n.split("_")[1])
    )
    if a.split != "all":
        odd = a.split == "dev"
        names = [n for n in names if (int(n.split("_")[1]) % 2 == 1) == odd]
    chats = []
    for n in names:
        with open(os.path.join(a.data, n), encoding="utf-8") as f:
            chats.append(Chat(n[: -len(".json")], json.load(f)))
    strata = qe.Strata(a.strata, os.path.join(a.workdir, a.split))
    try:
        known = {s["scope"] for s in json.loads(strata.run("--json", "stats")).get("scopes", [])}
    except (RuntimeError, ValueError, AttributeError):
        known = set()
    t0 = time.time()
    for c in chats:
        if c.name not in known:
            strata.load(c)
    rows, negatives, swapped = [], [], []
    for ci, c in enumerate(chats):
        idx = qe.TurnIndex(c)
        auto = {b: strata.window(c, b) for b in budgets}
        for q in c.queries:
            gold = q["gold"]
            row = {"chat": c.name, "query": q["query"], "category": q["category"], "gold": gold}
            for b in budgets:
                w = strata.window(c, b, question=q["query"])
                row[f"for_{b}"] = held_any_half(w, c, gold)
                row[f"auto_{b}"] = held_any_half(auto[b], c, gold)
                packed = idx.packed(q["query"], b)
                row[f"bm25_{b}"] = (bool(set(packed) & set(gold)),) * 2
            r = json.loads(strata.run("--json", "query", "--scope", c.name, q["query"]))
            cited = []
            for cit in r.get("citations", []):
                i = c.turn_of_source(str(cit.get("source", "")))
                if i is not None and i not in cited:
                    cited.append(i)
            bm = idx.bm25.get_scores(qe.analyse(q["query"]))
            order = [c.live[k] for k in sorted(range(len(bm)), key=lambda k: (-bm[k], k)) if bm[k] > 0]
            row.update(
                cited=cited,
                hit=bool(set(cited) & set(gold)),
                first=bool(cited[:1] and cited[0] in gold),
                ready=bool(r.get("ready")),
                confidence=float(r.get("confidence") or 0.0),
                answer=str(r.get("answer", ""))[:300],
                bm25_top1=bool(set(order[:1]) & set(gold)),
                bm25_top3=bool(set(order[:3]) & set(gold)),
                bm25_top10=bool(set(order[:10]) & set(gold)),
            )
            rows.append(row)
            if a.swapped:
                sq = swap_speaker(q["query"], c)
                if sq is not None:
                    s = json.loads(strata.run("--json", "query", "--scope", c.name, sq))
                    swapped.append(
                        {
                            "chat": c.name,
                            "query": q["query"],
                            "swapped": sq,
                            "ready": row["ready"],
                            "confidence": row["confidence"],
                            "swapped_ready": bool(s.get("ready")),
                            "swapped_confidence": float(s.get("confidence") or 0.0),
                        }
                    )
        if a.negatives and len(chats) > 1:
            other = chats[(ci + len(chats) // 2) % len(chats)]
            for q in other.queries:
                r = json.loads(strata.run("--json", "query", "--scope", c.name, q["query"]))
                negatives.append(
                    {"chat": c.name, "query": q["query"], "ready": bool(r.get("ready")), "confidence": float(r.get("confidence") or 0.0)}
                )
        print(f"realtalk: [{ci + 1}/{len(chats)}] {c.name}: {len(c.queries)} questions", file=sys.stderr)

    n = len(rows)

    def share(key, idx=None):
        xs = [(r[key][idx] if idx is not None else r[key]) for r in rows]
        return 100.0 * sum(bool(x) for x in xs) / max(1, len(xs))

    res = {"split": a.split, "chats": [c.name for c in chats], "questions": n, "seconds": round(time.time() - t0, 1)}
    summary = {}
    for b in budgets:
        summary[f"window_{b}"] = {
            meth: {"any": share(f"{meth}_{b}", 0), "half": share(f"{meth}_{b}", 1)} for meth in ["for", "bm25", "auto"]
        }
    summary["query"] = {
        "hit": share("hit"),
        "first": share("first"),
        "cited": sum(len(r["cited"]) for r in rows) / max(1, n),
        "ready": share("ready"),
        "bm25_top1": share("bm25_top1"),
        "bm25_top3": share("bm25_top3"),
        "bm25_top10": share("bm25_top10"),
    }
    if negatives:
        summary["negatives"] = {
            "questions": len(negatives),
            "ready": 100.0 * sum(r["ready"] for r in negatives) / len(negatives),
            "auc": auc([r["confidence"] for r in rows], [r["confidence"] for r in negatives]),
        }
    if swapped:
        summary["swapped"] = {
            "questions": len(swapped),
            "ready": 100.0 * sum(r["swapped_ready"] for r in swapped) / len(swapped),
            "original_ready": 100.0 * sum(r["ready"] for r in swapped) / len(swapped),
            "auc": auc([r["confidence"] for r in swapped], [r["swapped_confidence"] for r in swapped]),
        }
    res["summary"] = summary
    res.update(rows=rows, negatives=negatives, swapped=swapped)
    out = a.out or os.path.join(a.workdir, f"realtalk-{a.split}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(f"REALTALK {a.split}: {n} questions over {len(chats)} conversations ({res['seconds']} s)")
    if budgets:
        print("| window | " + " | ".join(f"{b} tokens: any / half" for b in budgets) + " |")
        print("|---|" + "---|" * len(budgets))
        for meth, label in [("for", "strata --for"), ("bm25", "BM25 messages packed"), ("auto", "strata auto")]:
            cells = [f"{summary[f'window_{b}'][meth]['any']:.1f} / {summary[f'window_{b}'][meth]['half']:.1f} %" for b in budgets]
            print(f"| {label} | " + " | ".join(cells) + " |")
    s = summary["query"]
    print(
        f"query: hit {s['hit']:.1f} %, first {s['first']:.1f} %, cited {s['cited']:.2f}, ready {s['ready']:.1f} %; "
        f"BM25 top 1 / 3 / 10: {s['bm25_top1']:.1f} / {s['bm25_top3']:.1f} / {s['bm25_top10']:.1f} %"
    )
    if negatives:
        s = summary["negatives"]
        print(f"another conversation's questions: {s['questions']}, ready {s['ready']:.1f} %, confidence AUC {s['auc']:.3f}")
    if swapped:
        s = summary["swapped"]
        print(
            f"the other speaker named: {s['questions']}, ready {s['ready']:.1f} % (unswapped {s['original_ready']:.1f} %), "
            f"confidence AUC {s['auc']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
