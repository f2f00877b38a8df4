#!/usr/bin/env python3
"""Tests of the REALTALK harness's reading of the data, offline: a conversation in
REALTALK's format read into debate rows, evidence ids resolved to lines, false premises
made by naming the other speaker.

    PY=$(scripts/qmsum-venv.sh | tail -n1)
    $PY scripts/realtalk/test_realtalk_eval.py
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realtalk_eval as r  # noqa: E402

CHAT = {
    "name": {"speaker_1": "Emi", "speaker_2": "elise"},
    "session_2": [
        {"clean_text": "Yes, we whipped up pasta with ham and peas.", "speaker": "Emi", "date_time": "30.12.2023, 22:27:53", "dia_id": "D2:9"},
    ],
    "session_1": [
        {"clean_text": "Hey! How are you?", "speaker": "Emi", "date_time": "29.12.2023, 22:42:04", "dia_id": "D1:1"},
        {"clean_text": "", "speaker": "elise", "date_time": "30.12.2023, 00:32:20", "dia_id": "D1:2"},
        {"clean_text": "I  went to   Art Basel.", "speaker": "elise", "date_time": "not a time", "dia_id": "D1:3"},
    ],
    "session_1_date_time": "29.12.2023, 22:42:04",
    "qa": [
        {"question": "What kind of pasta did Emi make?", "answer": "ham and peas", "evidence": ["D2:9"], "category": 2},
        {"question": "Where did Elise go?", "answer": "Art Basel", "evidence": ["D1:3; D1:2", "D9:9"], "category": 1},
        {"question": "What did they say?", "answer": "x", "evidence": ["D1:2"], "category": 1},
    ],
}


class ReadingTest(unittest.TestCase):
    def test_sessions_in_order_one_row_per_message(self):
        c = r.Chat("Chat_1_Emi_Elise", CHAT)
        rows = c.debate_jsonl().splitlines()
        self.assertEqual(len(rows), 4)
        first = json.loads(rows[0])
        self.assertEqual(first, {"round": 1, "speaker": "Emi", "text": "Hey! How are you?", "time": "2023-12-29T22:42:04Z"})
        self.assertEqual(rows[1], "")  # a message without text keeps its line
        third = json.loads(rows[2])
        self.assertEqual(third["text"], "I went to Art Basel.")
        self.assertNotIn("time", third)  # an unreadable time is left out
        self.assertEqual(json.loads(rows[3])["round"], 2)
        self.assertEqual(c.speakers, ["Emi", "elise"])
        self.assertEqual(c.source_of(3), "Chat_1_Emi_Elise.jsonl#4")
        self.assertEqual(c.turn_of_source("x/Chat_1_Emi_Elise.jsonl#4"), 3)
        self.assertIsNone(c.turn_of_source("other.jsonl#4"))

    def test_evidence_resolves_to_lines_with_text(self):
        c = r.Chat("Chat_1_Emi_Elise", CHAT)
        self.assertEqual([q["gold"] for q in c.queries], [[3], [2]])  # "D1:3; D1:2": the empty one dropped; D9:9 unknown
        # A question whose only evidence is a message without text is left out.
        self.assertEqual(len(c.queries), 2)

    def test_the_other_speaker_named(self):
        c = r.Chat("Chat_1_Emi_Elise", CHAT)
        self.assertEqual(r.swap_speaker("What kind of pasta did Emi make?", c), "What kind of pasta did Elise make?")
        self.assertEqual(r.swap_speaker("Where did Elise's friends go?", c), "Where did Emi's friends go?")
        self.assertIsNone(r.swap_speaker("What did Emi and Elise cook?", c))
        self.assertIsNone(r.swap_speaker("What did Kate cook?", c))


if __name__ == "__main__":
    unittest.main()
