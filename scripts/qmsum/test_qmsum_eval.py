#!/usr/bin/env python3
"""Tests of the QMSum harness, offline: a two-meeting split in QMSum's format and a fake
`strata` (a Python script answering `--version`, `context --help`, `ingest`, `compress`
and `context --json` with windows of the JSON shape the harness reads, `--for` included).

    PY=$(scripts/qmsum-venv.sh | tail -n1)
    $PY scripts/qmsum/test_qmsum_eval.py
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qmsum_eval as q  # noqa: E402

q.ENC, _ = q.load_cl100k()

TURNS = [
    {"speaker": "Project Manager", "content": "{vocalsound} Hello everyone ."},
    {"speaker": "Marketing", "content": "{disfmarker}"},
    {"speaker": "Project Manager", "content": "The budget for the remote control is twelve euros ."},
    {"speaker": "Marketing", "content": "Yeah ."},
    {"speaker": "Industrial Designer", "content": "We should use a rubber case for the remote .  It is soft ."},
    {"speaker": "Project Manager", "content": "Okay , see you ."},
]
MEETING = {
    "topic_list": [],
    "general_query_list": [
        {"query": "Summarize the whole meeting.", "answer": "The team discussed the budget of the remote and a rubber case."}
    ],
    "specific_query_list": [
        {"query": "What was said about the budget?", "answer": "x", "relevant_text_span": [["2", "3"]]},
        {"query": "What did the designer propose about the case?", "answer": "x", "relevant_text_span": [["1", "1"], ["4", "4"]]},
    ],
    "meeting_transcripts": TURNS,
}

# The fake strata: `--for` windows hold turn 3 (line 3) verbatim in part (bytes 0..10) at
# level full, and turn 5 (line 5) only beneath a summary node (not verbatim).
FAKE = r'''
import json, os, shutil, sys
sys.path.insert(0, HERE)
import qmsum_eval as q
q.ENC, _ = q.load_cl100k()
a = sys.argv[1:]
if a == ["--version"]:
    print("strata 0.0.0-fake"); sys.exit(0)
if a[:2] == ["context", "--help"]:
    print("  --for <QUESTION>  the question" if FOR else "  --level"); sys.exit(0)
db = a[a.index("--db") + 1]
os.makedirs(db, exist_ok=True)
scope = a[a.index("--scope") + 1]
if "ingest" in a:
    shutil.copy(a[-1], os.path.join(db, scope + ".jsonl")); sys.exit(0)
if "compress" in a:
    sys.exit(0)
budget = int(a[a.index("--budget") + 1])
lines = open(os.path.join(db, scope + ".jsonl")).read().split("\n")
turn = lambda n: json.loads(lines[n - 1])
question = next((x[len("--for="):] for x in a if x.startswith("--for=")), None)
if question is None:
    t = turn(1)
    text = q.cut_tokens("## Overview (abstract)\nRound 1: " + t["speaker"] + ": " + t["text"], budget, False)
    nodes = [{"id": "a", "level": "abstract", "tokens": 5, "part": "overview", "covers": {}, "partial": True}]
else:
    t3, t5 = turn(3), turn(5)
    text = ("## Round 1 (full)\n" + t3["speaker"] + " (round 1): " + t3["text"][:10]
            + "\n## Round 1 (summary)\n" + t5["speaker"] + ": rubber case for the remote")
    nodes = [
        {"id": "f", "level": "full", "tokens": 3, "part": "excerpt", "partial": True,
         "spans": [{"source": scope + ".jsonl#3", "start": 0, "end": 10}]},
        {"id": "s", "level": "summary", "tokens": 9, "part": "history", "partial": False,
         "spans": [{"source": scope + ".jsonl#5", "start": 0, "end": len(t5["text"].encode())},
                   {"source": "other.jsonl#3", "start": 0, "end": 5}]},
    ]
print(json.dumps({"scope": scope, "level": "auto", "budget": budget, "tokens": q.ntok(text), "text": text, "nodes": nodes}))
'''


def make_split(root: str) -> str:
    data = os.path.join(root, "data")
    os.makedirs(os.path.join(data, "val"))
    for name in ("M1", "M2"):
        with open(os.path.join(data, "val", name + ".json"), "w") as f:
            json.dump(MEETING, f)
    with open(os.path.join(data, ".complete"), "w") as f:
        f.write("0" * 40 + "\n")
    return data


def make_fake(root: str, with_for: bool) -> str:
    path = os.path.join(root, "strata")
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\nHERE = {HERE!r}\nFOR = {with_for!r}\n" + textwrap.dedent(FAKE))
    os.chmod(path, 0o755)
    return path


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["qmsum_eval.py", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = q.main()
    finally:
        sys.argv = old
    return rc, out.getvalue(), err.getvalue()


class Pieces(unittest.TestCase):
    def setUp(self):
        self.m = q.Meeting("M1", MEETING, 20)

    def test_cleaning_and_debate_lines(self):
        self.assertEqual(self.m.turns[0], ("Project Manager", "Hello everyone ."))
        self.assertEqual(self.m.turns[1][1], "")
        lines = self.m.debate_jsonl().split("\n")
        self.assertEqual(lines[1], "")  # an empty turn is a blank line: line k stays turn k-1
        self.assertEqual(json.loads(lines[2])["text"], "The budget for the remote control is twelve euros .")
        self.assertEqual(json.loads(lines[2])["round"], 1)
        self.assertEqual(self.m.turn_of_source("/x/M1.jsonl#3"), 2)
        self.assertIsNone(self.m.turn_of_source("M2.jsonl#3"))
        self.assertEqual(q.Meeting("M1", MEETING, 2).debate_jsonl().split("\n")[4], json.dumps(
            {"round": 3, "speaker": "Industrial Designer", "text": TURNS[4]["content"].replace("  ", " ")}))

    def test_gold_drops_empty_turns(self):
        self.assertEqual([x["gold"] for x in self.m.queries], [[2, 3], [4]])

    def test_sentences(self):
        t = self.m.turns[4][1]
        self.assertEqual([t[a:b] for a, b in q.sentences_of(t)], ["We should use a rubber case for the remote .", "It is soft ."])

    def test_strip_markup(self):
        sp = self.m.speakers
        text = "## Overview (abstract)\nRound 3: Marketing: Yeah . Project Manager: So .\nRound 4: On .\n\nIndustrial Designer (round 2): We ."
        self.assertEqual(q.strip_markup(text, sp), "Yeah . So .\nOn .\nWe .")

    def test_pack_stays_within_budget(self):
        line_of = lambda i: (i, self.m.line(i))  # noqa: E731
        every = self.m.live
        for b in range(1, 60):
            chosen = q.pack(every, line_of, b)
            self.assertLessEqual(q.ntok(q.render(chosen, line_of)), b)
        self.assertEqual(sorted(q.pack(every, line_of, 10_000)), every)

    def test_cut_tokens(self):
        text = "\n".join(self.m.line(i) for i in self.m.live)
        for n in (1, 7, 20):
            self.assertLessEqual(q.ntok(q.cut_tokens(text, n, tail=False)), n)
            self.assertLessEqual(q.ntok(q.cut_tokens(text, n, tail=True)), n)
        self.assertTrue(q.cut_tokens(text, 5, tail=True).endswith("see you ."))

    def test_held_and_bytes(self):
        w = {"nodes": [
            {"level": "full", "spans": [{"source": "M1.jsonl#5", "start": 3, "end": 9}, {"source": "M1.jsonl#5", "start": 5, "end": 12}]},
            {"level": "detailed", "spans": [{"source": "M1.jsonl#3", "start": 0, "end": 40}]},
        ]}
        held = q.held_strict(w, self.m)
        self.assertEqual(set(held), {4})
        size = len(self.m.turns[4][1].encode())
        self.assertEqual(q.gold_bytes_held(self.m, [4], held), (9, size))

    def test_text_overlap(self):
        idx = q.TurnIndex(self.m)
        # Turn 3 ("Yeah .") has no content word: out of the denominator.
        self.assertEqual(q.held_text("the remote budget", self.m, idx, [2, 3]), (0, 1))
        self.assertEqual(q.held_text("budget remote control", self.m, idx, [2, 3]), (1, 1))

    def test_substantive_sentences_count_only_when_held_verbatim(self):
        t2 = "The budget for the remote control is twelve euros ."
        t4 = "We should use a rubber case for the remote ."
        window = "## Overview\nProject Manager (round 1): " + t2 + "\nIndustrial Designer: It is soft ."
        # Turn 2's one sentence is held; "Yeah ." (turn 3) has no content word: not counted.
        self.assertEqual(q.substantive_held(self.m, [2, 3], window), (len(t2), len(t2)))
        # Turn 4: "It is soft ." is held but has one content word; its substantive sentence is not.
        self.assertEqual(q.substantive_held(self.m, [4], window), (0, len(t4)))
        # The same words elsewhere in the window, not the sentence: not held.
        self.assertEqual(q.substantive_held(self.m, [4], "rubber case remote, we should use"), (0, len(t4)))
        # By count: one of turn 2's one substantive sentence, none of turn 4's one.
        self.assertEqual(q.substantive_count_held(self.m, [2, 3], window), (1, 1))
        self.assertEqual(q.substantive_count_held(self.m, [2, 4], window), (1, 2))

    def test_bm25_ranks_the_matching_turn_first(self):
        idx = q.TurnIndex(self.m)
        self.assertEqual(idx.packed("rubber case", 10_000), [4])
        self.assertEqual(idx.packed("rubber case", 3), [])
        # Filled: the score-0 turns follow in transcript order.
        self.assertEqual(idx.packed("rubber case", 10_000, fill=True), [4, 0, 2, 3, 5])


class Swapped(unittest.TestCase):
    """qmsum_query.swap_speaker: the false premises of `--swapped`."""

    def meeting(self, speakers_turns, query, span):
        import qmsum_query as qq

        data = {
            "meeting_transcripts": [{"speaker": s, "content": t} for s, t in speakers_turns],
            "general_query_list": [{"query": "Summarize the whole meeting.", "answer": "A meeting."}],
            "specific_query_list": [{"query": query, "answer": "x", "relevant_text_span": [span]}],
        }
        m = q.Meeting("S", data, 20)
        return qq, m, m.queries[0]

    def test_the_named_speaker_is_replaced_by_one_who_took_no_part(self):
        turns = [("PhD A", "The noise floor is too high ."), ("PhD G", "Right .")]
        turns += [("PhD G", f"The disk number {i} is full .") for i in range(12)]
        turns += [("Grad E", f"Item {i} .") for i in range(11)]
        qq, m, query = self.meeting(turns, "What did PhD A think about the noise floor?", ["0", "1"])
        # PhD G has a turn in the gold span: Grad E, with fewer turns, is the one named.
        self.assertEqual(qq.swap_speaker(query, m), "What did Grad E think about the noise floor?")

    def test_names_without_titles_and_last_names(self):
        turns = [("Hon. Bill Morneau", "The debt is manageable ."), ("The Chair", "Thank you .")]
        turns += [("Hon. Pierre Poilievre", f"Question {i} on spending .") for i in range(10)]
        qq, m, query = self.meeting(turns, "What did Morneau say about the debt?", ["0", "0"])
        self.assertEqual(qq.swap_speaker(query, m), "What did Poilievre say about the debt?")
        qq, m, query = self.meeting(turns, "What did Bill Morneau say about the debt?", ["0", "0"])
        self.assertEqual(qq.swap_speaker(query, m), "What did Pierre Poilievre say about the debt?")

    def test_no_swap_without_one_named_speaker_or_a_stand_in(self):
        turns = [("Marketing", "Buttons are cheap ."), ("Project Manager", "Okay .")]
        qq, m, query = self.meeting(turns, "What did the group decide about buttons?", ["0", "1"])
        self.assertIsNone(qq.swap_speaker(query, m))
        # Named, but nobody else has 10 turns outside the gold span.
        qq, m, query = self.meeting(turns, "What did Marketing say about buttons?", ["0", "0"])
        self.assertIsNone(qq.swap_speaker(query, m))


class EndToEnd(unittest.TestCase):
    def test_fake_strata_with_for(self):
        with tempfile.TemporaryDirectory() as d:
            data = make_split(d)
            out = os.path.join(d, "r.json")
            rc, md, _ = run(["--data", data, "--strata", make_fake(d, True), "--workdir", os.path.join(d, "w"),
                          "--budgets", "40,5000", "--out", out])
            self.assertEqual(rc, 0)
            r = load(out)
            self.assertEqual((r["meetings"], r["queries"], r["settings"]["for_impl"]), (2, 4, "strata"))
            big = r["recall"]["5000"]
            # Query 1: gold {2, 3}, turn 2 verbatim (10 bytes of it); query 2: gold {4}, only
            # beneath a summary node: not held verbatim, held by text.
            self.assertAlmostEqual(big["strata"]["strict"], (1 / 2 + 0) / 2)
            self.assertAlmostEqual(big["strata"]["text"], (0 + 1) / 2)
            g1 = len(self.m_text(2)) + len(self.m_text(3))
            self.assertAlmostEqual(big["strata"]["gold_text_share"], (10 / g1 + 0) / 2)
            self.assertAlmostEqual(big["ceiling"]["strict"], 1.0)
            self.assertAlmostEqual(big["bm25_fill"]["strict"], 1.0)
            # Per meeting: one `auto` window at the summary's length, one per --auto-budgets
            # value (1000, 2000), one `--for` window per query and budget.
            self.assertEqual(r["token_count_mismatches"], {"windows": 2 + 2 * 2 + 2 * 2 * 2, "mismatched": 0})
            # (c): the fake's `auto` window is the first turn ("Hello everyone ."), which
            # holds no gold sentence; the first 1,000 tokens are the whole transcript.
            self.assertEqual(r["settings"]["auto_budgets"], [1000, 2000])
            self.assertEqual(r["kept"]["1000"]["strata_auto"], {"share": 0.0, "sentences": 0.0, "any": 0.0, "queries": 4})
            self.assertEqual(r["kept"]["1000"]["first_n"], {"share": 1.0, "sentences": 1.0, "any": 1.0, "queries": 4})
            self.assertIn("| 2,000 | strata `auto` | 0.0 % | 0.0 % | 0.0 % |", md)
            self.assertIn("strata_auto", r["rouge"])
            self.assertIn("| 5,000 | strata `--for` |", md)
            self.assertIn("| strata `auto` |", md)
            # The debate file strata read: line 3 is turn 2.
            with open(os.path.join(d, "w", "meetings", "M1.jsonl")) as f:
                lines = f.read().split("\n")
            self.assertEqual(json.loads(lines[2])["text"], self.m_text(2))

    def test_a_window_over_its_budget_fails_the_run(self):
        with tempfile.TemporaryDirectory() as d:
            data = make_split(d)
            rc, _, err = run(["--data", data, "--strata", make_fake(d, True), "--workdir", os.path.join(d, "w"),
                              "--budgets", "20", "--limit", "1"])
            self.assertEqual(rc, 1)
            self.assertIn("qmsum: ERROR: M1: strata's window has", err)

    def test_a_missing_binary_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(SystemExit) as e:
                run(["--data", make_split(d), "--strata", os.path.join(d, "nope")])
            self.assertTrue(str(e.exception.code).startswith("qmsum: no strata binary at "))

    def test_binary_without_for_skips_the_column(self):
        with tempfile.TemporaryDirectory() as d:
            data = make_split(d)
            out = os.path.join(d, "r.json")
            rc, md, _ = run(["--data", data, "--strata", make_fake(d, False), "--workdir", os.path.join(d, "w"),
                          "--budgets", "50", "--out", out, "--limit", "1"])
            self.assertEqual(rc, 0)
            r = load(out)
            self.assertEqual(r["settings"]["for_impl"], "none")
            self.assertNotIn("strata", r["recall"]["50"])
            self.assertIn("not run", md)

    def test_mock_is_labelled_mock(self):
        with tempfile.TemporaryDirectory() as d:
            data = make_split(d)
            out = os.path.join(d, "r.json")
            rc, md, _ = run(["--data", data, "--no-strata", "--for-impl", "bm25-sentences", "--workdir",
                          os.path.join(d, "w"), "--budgets", "5000", "--out", out])
            self.assertEqual(rc, 0)
            r = load(out)
            self.assertIn("mock", r["recall"]["5000"])
            self.assertNotIn("strata", r["recall"]["5000"])
            self.assertNotIn("strata_auto", r["rouge"])
            self.assertIn("MOCK", md)
            # "What did the designer propose about the case?" -> the rubber-case sentence of turn 4.
            self.assertGreater(r["recall"]["5000"]["mock"]["strict"], 0)

    def m_text(self, i):
        return q.Meeting("M1", MEETING, 20).turns[i][1]


if __name__ == "__main__":
    unittest.main()
