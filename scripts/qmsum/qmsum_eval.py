#!/usr/bin/env python3
"""QMSum evaluation of strata's context windows (issue 21, "How to measure").

README
======
QMSum (Zhong et al., NAACL 2021; github.com/Yale-LILY/QMSum) holds real meetings (AMI
product meetings, ICSI research meetings, Welsh and Canadian parliamentary committees)
with human query-based summaries. Each meeting JSON has `meeting_transcripts`
[{speaker, content}], one general query (the whole meeting's summary) and specific queries
whose `relevant_text_span` lists [start, end] turn indices (inclusive, as strings).

Run it through `scripts/qmsum.sh` (fetch, venv, build, run), or by hand:

    DATA=$(QMSUM_DIR=/path/to/QMSum scripts/fetch-qmsum.sh | tail -n1)
    PY=$(scripts/qmsum-venv.sh | tail -n1)
    cargo build --locked
    $PY scripts/qmsum/qmsum_eval.py --data "$DATA" --split val --strata target/debug/strata \
        --workdir target/qmsum-work --out target/qmsum-val.json > qmsum-val.md

Develop on `val`; `test` is reported once, at the end.

What it measures, side by side in one run
-----------------------------------------
(a) Question-focused windows at each budget (default 500, 1000, 2000 cl100k tokens): the
    recall of the gold relevant turns of every specific query (mean over queries).
    - strata: `strata context --scope M --for QUERY --budget B --json`.
    - bm25: the meeting's turns ranked by BM25 (rank-bm25's BM25Okapi) for the query,
      packed greedily in rank order (a turn that does not fit is skipped, the next one
      tried; turns with score <= 0 are never packed), rendered `Speaker: text` one a line
      in transcript order, the whole text within B tokens.
    - bm25_fill: the same, then the turns scoring 0 (no query word) in transcript order
      until the budget is full. Reported beside bm25 because it fills the window the way a
      method that spends its whole budget does; what it adds is the meeting's opening turns,
      i.e. position, not retrieval.
    - ceiling (reference only, not a method): the gold turns themselves, shortest first,
      packed the same way: the most gold turns B tokens can hold.
    Two ways to count a gold turn as held, both reported:
    - strict ("verbatim"): some node of the window at level `full` has a span (`spans`:
      [{source, start, end}] in the JSON) in that turn's source (`FILE#LINE`); for bm25 and
      the ceiling: the turn was packed.
    - text: at least 50 % of the turn's content words (the analyser below: lower-case
      words, sumy's English stop words and spoken fillers (yeah, um, uh, hmm, mm, oh...)
      removed, Snowball-stemmed; the same analyser is BM25's) occur in the window text
      (headers and labels removed). Turns with no content word (e.g. "Yeah .") are left
      out of this variant's denominator.
(b) The unfocused window at the length of the gold summary (the meeting's one general
    query, "Summarize the whole meeting" or a paraphrase; budget N = its answer's cl100k
    tokens): ROUGE-1/2/L F1 (rouge-score, use_stemmer=True) against that answer, for
    strata's `auto` window (`strata context --scope M --level auto --budget N --json`),
    LexRank and TextRank (sumy, English stop words and stemmer), the first N tokens, the
    last N tokens, and random sentences (seeded). Sentence selectors pack sentences in their
    rank order while they fit (a sentence that does not fit is skipped), rendered
    `Speaker: sentence` one a line in transcript order; first/last N are cut from the whole
    transcript rendered `Speaker: text` one a line. Every text is at most N tokens.
    ROUGE is computed on the text with markup removed, identically for every method: lines
    starting `## ` dropped, a leading speaker label (`Speaker: `, or strata's
    `Speaker (round R): `) removed from each line. Speaker and round labels are NOT scored.
(c) The unfocused windows again, at fixed budgets (`--auto-budgets`, default 1000 and 2000
    cl100k tokens: where an agent's context is, and where the issue's key-fact targets are),
    judged by the meeting's specific queries instead of its summary: for each query, the
    share of its gold turns' *substantive* sentences (three content words or more, by the
    analyser below) found verbatim in the window text, by bytes and by count (a long
    sentence weighs more by bytes, each one the same by count: a key fact is one sentence),
    and whether any one is.
    Verbatim and sentence-level, so that a window is credited only with what it shows of a
    turn (the `text` measure of (a) credits vocabulary that occurs anywhere, and random
    sentences score well on it). Same methods as (b) — strata `auto`, LexRank, TextRank,
    first and last N tokens, random sentences — each packed to the budget as in (b). What
    people ask about a meeting is a human label of what in it matters.

Input to every method (cleaned identically for all): each turn's `content` with the
transcription markers `{disfmarker}`, `{vocalsound}`, `{gap}`, `{pause}`, `{comment}`,
`{nonvocalsound}` (any `{word}`) removed and runs of white space squeezed to one space;
nothing else changes (QMSum's tokenised spelling "we 're" is kept). A turn left empty (only
markers; 1,253 of val's 20,123 turns) is no turn: it is written as a blank line in the
debate file (strata skips blank lines, so line k is still turn k-1), no method sees it, and
it is left out of the gold sets.

strata's input: one debate JSON Lines file per meeting (`M.jsonl`, line k = turn k-1,
`{"round": 1 + (k-1) // 20, "speaker": ..., "text": ...}`: QMSum has no rounds, so every
20 turns make one; `--turns-per-round`), ingested into scope M of one database per run
directory (`WORKDIR/db`), compressed (`strata compress`, the configured model: offline
unless a config says otherwise), then windowed. A turn's source id is `M.jsonl#LINE`.

Tokens: cl100k_base through tiktoken, loaded from the BPE file shipped in the tiktoken-rs
crate (strata's own tokenizer; the file's sha256 is checked), never downloaded. Every
strata window's `tokens` is compared with this count of its `text` (reported as
`token_count_mismatches`).

`--for-impl bm25-sentences` replaces strata's `--for` window by the harness's own
sentence-level BM25 packing (spans of sentences in the turns, level `full`), only to
exercise the scoring code path while `--for` does not exist: its figures are labelled
`mock` and are NOT strata's. `--for-impl none` skips the strata `--for` column. With the
default `--for-impl strata`, a binary without `--for` gets the column skipped with a note.

`--no-strata` runs the baselines alone (no binary needed). The harness's own tests (offline,
a fake strata binary): `$PY scripts/qmsum/test_qmsum_eval.py`.

Output: a results JSON (`--out`; split, commit, data sha256, versions, settings, timings,
per-meeting and mean figures) and a Markdown table on stdout. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from importlib.metadata import version as pkg_version

import numpy as np
import tiktoken
import tiktoken.load
from nltk.stem.snowball import EnglishStemmer
from rank_bm25 import BM25Okapi
from rouge_score import rouge_scorer
from sumy.models.dom import ObjectDocumentModel, Paragraph, Sentence
from sumy.nlp.stemmers import Stemmer
from sumy.summarizers.lex_rank import LexRankSummarizer
from sumy.summarizers.text_rank import TextRankSummarizer
from sumy.utils import get_stop_words

# --- tokens -------------------------------------------------------------------------------

# tiktoken's own definition of cl100k_base (tiktoken_ext/openai_public.py, tiktoken 0.14.0).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def find_cl100k_file() -> str:
    """The cl100k BPE file of the newest tiktoken-rs crate in the cargo registry."""
    explicit = os.environ.get("CL100K_FILE")
    if explicit:
        return explicit
    home = os.environ.get("CARGO_HOME") or os.path.join(os.path.expanduser("~"), ".cargo")
    found = glob.glob(os.path.join(home, "registry", "src", "*", "tiktoken-rs-*", "assets", "cl100k_base.tiktoken"))
    if not found:
        sys.exit(
            "qmsum: no cl100k_base.tiktoken under "
            f"{home}/registry/src/*/tiktoken-rs-*/assets (run `cargo fetch --locked` first, or set CL100K_FILE)"
        )

    def ver(p: str):
        m = re.search(r"tiktoken-rs-(\d+)\.(\d+)\.(\d+)", p)
        return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)

    return max(found, key=ver)


def load_cl100k() -> tuple[tiktoken.Encoding, str]:
    path = find_cl100k_file()
    ranks = tiktoken.load.load_tiktoken_bpe(path, expected_hash=CL100K_SHA256)
    enc = tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PAT,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL,
    )
    return enc, path


ENC: tiktoken.Encoding | None = None


def ntok(text: str) -> int:
    return len(ENC.encode(text, disallowed_special=()))


# --- text ---------------------------------------------------------------------------------

MARKER = re.compile(r"\{[A-Za-z_]+\}")


def clean(content: str) -> str:
    """The one cleaning every method sees: transcription markers out, white space squeezed."""
    return " ".join(MARKER.sub(" ", content).split())


SENT_END = re.compile(r"(?<=[.?!])\s+")


def sentences_of(text: str) -> list[tuple[int, int]]:
    """Byte-free character spans of the sentences of a cleaned turn: split after . ? ! and
    white space (QMSum's text is tokenised, so "Check one . Check one ." is two)."""
    out, start = [], 0
    for m in SENT_END.finditer(text):
        if m.start() > start:
            out.append((start, m.start()))
        start = m.end()
    if start < len(text):
        out.append((start, len(text)))
    return out


WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# sumy's English stop words, and spoken fillers (a meeting's "Yeah ." or "Mm-hmm ." carries
# no content word).
FILLERS = "yeah yep yup um umm uh uhm hmm hm mm mmm mhm hmm huh oh ooh ah eh er erm".split()
STOP = frozenset(w.lower() for w in get_stop_words("english")) | frozenset(FILLERS)
_STEM = EnglishStemmer()
_stem_cache: dict[str, str] = {}


def stem(w: str) -> str:
    s = _stem_cache.get(w)
    if s is None:
        s = _STEM.stem(w)
        _stem_cache[w] = s
    return s


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def analyse(text: str) -> list[str]:
    """Content words: lower-case words, stop words out, Snowball-stemmed (BM25, text overlap)."""
    return [stem(w) for w in words(text) if w not in STOP]


class Words:
    """sumy's tokenizer interface (it only calls to_sentences/to_words); sentences are
    given to sumy already split, so to_sentences is never needed for them."""

    language = "english"

    def to_sentences(self, paragraph: str):
        return [paragraph[a:b] for a, b in sentences_of(paragraph)]

    def to_words(self, sentence: str):
        return WORD.findall(sentence.lower())


def strip_markup(text: str, speakers: list[str]) -> str:
    """Window text as scored, the same for every method: `## ` header lines dropped, and
    the labels strata writes removed: a leading `Round R: ` and/or `Speaker: ` or
    `Speaker (round R): ` on a line, and a `Speaker: ` inside a line after white space
    (an overview line joins sentences of several turns). Speaker names are the meeting's
    own, matched exactly."""
    start, inline = label_patterns(speakers)
    out = []
    for line in text.split("\n"):
        if line.startswith("## "):
            continue
        line = inline.sub("", start.sub("", line, count=1))
        if line.strip():
            out.append(line)
    return "\n".join(out)


_label_cache: dict[tuple[str, ...], tuple[re.Pattern, re.Pattern]] = {}


def label_patterns(speakers: list[str]) -> tuple[re.Pattern, re.Pattern]:
    key = tuple(speakers)
    if key not in _label_cache:
        alts = "|".join(re.escape(s) for s in sorted(set(speakers), key=len, reverse=True))
        who = rf"(?:{alts})(?: \(round \d+\))?: "
        _label_cache[key] = (
            re.compile(rf"^\s*(?:Rounds? \d+(?:[\u2013-]\d+)?: )?(?:{who})?"),
            re.compile(rf"(?<=\s){who}"),
        )
    return _label_cache[key]


# --- meetings -----------------------------------------------------------------------------


class Meeting:
    def __init__(self, name: str, data: dict, turns_per_round: int):
        self.name = name
        self.turns: list[tuple[str, str]] = []  # (speaker, cleaned text); text may be ""
        for t in data["meeting_transcripts"]:
            speaker = " ".join(str(t["speaker"]).split()) or "Unknown"
            self.turns.append((speaker, clean(str(t["content"]))))
        self.live = [i for i, (_, x) in enumerate(self.turns) if x]
        self.speakers = sorted({s for s, _ in self.turns})
        self.turns_per_round = turns_per_round
        # The first general query summarises the whole meeting ("Summarize the whole
        # meeting."); a few test meetings add others ("What were the final decisions?"),
        # which are not summaries of the whole and are left out.
        general = data["general_query_list"]
        if not general:
            raise SystemExit(f"qmsum: {name}: no general query")
        self.summary_query = general[0]["query"]
        self.summary = general[0]["answer"]
        self.queries = []
        for q in data["specific_query_list"]:
            gold = set()
            for a, b in q["relevant_text_span"]:
                a, b = int(a), int(b)
                if not 0 <= a <= b < len(self.turns):
                    raise SystemExit(f"qmsum: {name}: span [{a}, {b}] outside {len(self.turns)} turns")
                gold.update(range(a, b + 1))
            gold = sorted(i for i in gold if self.turns[i][1])
            self.queries.append({"query": q["query"], "gold": gold})
        # Sentences: (turn, start, end) character spans of the cleaned text.
        self.sentences = [(i, a, b) for i in self.live for a, b in sentences_of(self.turns[i][1])]
        self.file = f"{name}.jsonl"

    def line(self, i: int) -> str:
        s, x = self.turns[i]
        return f"{s}: {x}"

    def debate_jsonl(self) -> str:
        rows = []
        for i, (s, x) in enumerate(self.turns):
            if not x:
                rows.append("")
                continue
            r = 1 + i // self.turns_per_round
            rows.append(json.dumps({"round": r, "speaker": s, "text": x}, ensure_ascii=False))
        return "\n".join(rows) + "\n"

    def source_of(self, i: int) -> str:
        return f"{self.file}#{i + 1}"

    def turn_of_source(self, source: str) -> int | None:
        f, _, n = source.rpartition("#")
        if os.path.basename(f) != self.file or not n.isdigit():
            return None
        i = int(n) - 1
        return i if 0 <= i < len(self.turns) else None


# --- packing ------------------------------------------------------------------------------


def pack(items: list, line_of, budget: int) -> list:
    """Greedy packing: items (already in rank order) are added while the window, their lines
    in the given key order joined by newlines, stays within `budget` tokens; one that does
    not fit is skipped. `line_of(item) -> (order_key, line)`. Returns the chosen items."""
    chosen, used = [], 0
    for it in items:
        c = ntok(line_of(it)[1]) + 1
        if used + c <= budget + 1:
            chosen.append(it)
            used += c
    # Per-line counts are nearly exact (a newline is its own token after a letter, but
    # merges after punctuation); check the joined text and drop the last picked while over.
    while chosen and ntok(render(chosen, line_of)) > budget:
        chosen.pop()
    return chosen


def render(items: list, line_of) -> str:
    return "\n".join(l for _, l in sorted(line_of(it) for it in items))


def cut_tokens(text: str, n: int, tail: bool) -> str:
    ids = ENC.encode(text, disallowed_special=())
    part = ids[-n:] if tail else ids[:n]
    out = ENC.decode(part)
    while ntok(out) > n:  # a decode/encode round trip can merge differently at the edge
        part = part[1:] if tail else part[:-1]
        out = ENC.decode(part)
    return out


# --- question-focused windows -------------------------------------------------------------


class TurnIndex:
    def __init__(self, m: Meeting):
        self.m = m
        self.docs = [analyse(m.turns[i][1]) for i in m.live]
        # BM25Okapi divides by the mean length: a meeting of only stop-word turns is not a case.
        self.bm25 = BM25Okapi([d if d else ["\u2205"] for d in self.docs])
        self.content = {i: set(d) for i, d in zip(m.live, self.docs)}

    def packed(self, query: str, budget: int, fill: bool = False) -> list[int]:
        """Turns by BM25 score, packed; only those with a score above 0, or (`fill`) every
        turn, the ties at 0 in transcript order."""
        scores = self.bm25.get_scores(analyse(query))
        order = sorted(range(len(scores)), key=lambda k: (-scores[k], k))
        ranked = [self.m.live[k] for k in order if fill or scores[k] > 0]
        return pack(ranked, lambda i: (i, self.m.line(i)), budget)


class SentenceIndex:
    """The mock `--for`: sentences ranked by BM25 and packed; a window in strata's JSON shape."""

    def __init__(self, m: Meeting):
        self.m = m
        docs = [analyse(m.turns[i][1][a:b]) for i, a, b in m.sentences]
        self.bm25 = BM25Okapi([d if d else ["\u2205"] for d in docs])

    def window(self, query: str, budget: int) -> dict:
        m = self.m
        scores = self.bm25.get_scores(analyse(query))
        order = [k for k in sorted(range(len(scores)), key=lambda k: (-scores[k], k)) if scores[k] > 0]

        def line_of(k):
            i, a, b = m.sentences[k]
            return (k, f"{m.turns[i][0]}: {m.turns[i][1][a:b]}")

        chosen = sorted(pack(order, line_of, budget))
        text = render(chosen, line_of)
        nodes = []
        for k in chosen:
            i, a, b = m.sentences[k]
            t = m.turns[i][1]
            nodes.append(
                {
                    "id": f"mock:{i}:{a}",
                    "level": "full",
                    "tokens": ntok(t[a:b]),
                    "part": "excerpt",
                    "partial": True,
                    "spans": [{"source": m.source_of(i), "start": len(t[:a].encode()), "end": len(t[:b].encode())}],
                }
            )
        return {"scope": m.name, "level": "for", "budget": budget, "tokens": ntok(text), "text": text, "nodes": nodes}


def held_strict(window: dict, m: Meeting) -> dict[int, list[tuple[int, int]]]:
    """The turns whose text is in the window verbatim: the byte ranges of each turn's
    source covered by the spans of the window's `full` nodes."""
    held: dict[int, list[tuple[int, int]]] = {}
    for node in window.get("nodes", []):
        if str(node.get("level", "")).lower() != "full":
            continue
        for sp in node.get("spans") or []:
            i = m.turn_of_source(str(sp.get("source", "")))
            start, end = int(sp.get("start", 0)), int(sp.get("end", 0))
            if i is not None and end > start:
                held.setdefault(i, []).append((start, end))
    return held


def covered_bytes(ranges: list[tuple[int, int]], size: int) -> int:
    total, last = 0, 0
    for a, b in sorted(ranges):
        a, b = max(a, last), min(b, size)
        if b > a:
            total += b - a
            last = b
    return total


def gold_bytes_held(m: Meeting, gold: list[int], held: dict[int, list[tuple[int, int]]]) -> tuple[int, int]:
    """(bytes of the gold turns' text in the window verbatim, bytes of the gold turns)."""
    size = {i: len(m.turns[i][1].encode()) for i in gold}
    return sum(covered_bytes(held.get(i, []), size[i]) for i in gold), sum(size.values())


def whole_turns(turns) -> dict[int, list[tuple[int, int]]]:
    return {i: [(0, 1 << 62)] for i in turns}


def held_text(text: str, m: Meeting, idx: TurnIndex, gold: list[int]) -> tuple[int, int]:
    """(gold turns with >= 50 % of their content words in `text`, gold turns with any)."""
    have = set(analyse(strip_markup(text, m.speakers)))
    hit = den = 0
    for i in gold:
        c = idx.content.get(i) or set()
        if not c:
            continue
        den += 1
        if 2 * len(c & have) >= len(c):
            hit += 1
    return hit, den


def substantive_sentences(m: Meeting, gold: list[int]):
    """The gold turns' *substantive* sentences (three content words or more), stripped."""
    want = set(gold)
    for i, a, b in m.sentences:
        if i in want:
            sent = m.turns[i][1][a:b].strip()
            if len(analyse(sent)) >= 3:
                yield sent


def substantive_held(m: Meeting, gold: list[int], text: str) -> tuple[int, int]:
    """(bytes of the gold turns' substantive sentences that occur verbatim in `text`, bytes
    of all of them). Sentence-level and verbatim, so that a window is credited only with
    what it shows of a turn, not with vocabulary that happens to occur elsewhere in it."""
    sizes = [(len(s.encode()), s in text) for s in substantive_sentences(m, gold)]
    return sum(n for n, held in sizes if held), sum(n for n, _ in sizes)


def substantive_count_held(m: Meeting, gold: list[int], text: str) -> tuple[int, int]:
    """(how many of the gold turns' substantive sentences occur verbatim in `text`, how many
    there are): `substantive_held` by count instead of bytes."""
    held = [s in text for s in substantive_sentences(m, gold)]
    return sum(held), len(held)


def score(m: Meeting, idx: TurnIndex, gold: list[int], held: dict, text: str) -> dict:
    hit, den = held_text(text, m, idx, gold)
    got, size = gold_bytes_held(m, gold, held)
    return {
        "strict": len(set(held) & set(gold)),
        "text": hit,
        "text_den": den,
        "gold_bytes_held": got,
        "gold_bytes": size,
        "tokens": ntok(text),
    }


# --- unfocused windows --------------------------------------------------------------------


class Ranked:
    """Mixin: sumy's summarizers hand their ratings to _get_best_sentences; keep the full
    ranking (best first, ties in transcript order) instead of a top-k."""

    @staticmethod
    def _get_best_sentences(sentences, count, rating, *args, **kwargs):
        rate = rating if callable(rating) else (lambda s: rating[s])
        return sorted(range(len(sentences)), key=lambda k: (-rate(sentences[k]), k))


class RankedLexRank(Ranked, LexRankSummarizer):
    pass


class RankedTextRank(Ranked, TextRankSummarizer):
    pass


def sumy_ranking(cls, m: Meeting) -> list[int]:
    tok = Words()
    sents = [Sentence(m.turns[i][1][a:b], tok) for i, a, b in m.sentences]
    doc = ObjectDocumentModel([Paragraph(sents)])
    s = cls(Stemmer("english"))
    s.stop_words = get_stop_words("english")
    return list(s(doc, len(sents)))


def sentence_window(m: Meeting, ranking: list[int], budget: int) -> str:
    def line_of(k):
        i, a, b = m.sentences[k]
        return (k, f"{m.turns[i][0]}: {m.turns[i][1][a:b]}")

    return render(pack(ranking, line_of, budget), line_of)


# --- strata -------------------------------------------------------------------------------


class Strata:
    def __init__(self, binary: str, workdir: str):
        self.binary = os.path.abspath(binary)
        self.db = os.path.join(os.path.abspath(workdir), "db")
        self.dir = os.path.join(os.path.abspath(workdir), "meetings")
        os.makedirs(self.dir, exist_ok=True)
        self.mismatches = 0
        self.windows = 0

    def run(self, *args: str) -> str:
        cmd = [self.binary, "--db", self.db, *args]
        p = subprocess.run(cmd, cwd=self.dir, capture_output=True, text=True)
        if p.returncode != 0:
            err = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"`{' '.join(cmd[1:])}` failed: {err}")
        return p.stdout

    def version(self) -> str:
        return subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()

    def has_for(self) -> bool:
        p = subprocess.run([self.binary, "context", "--help"], capture_output=True, text=True)
        return "--for" in p.stdout

    def load(self, m: Meeting) -> None:
        path = os.path.join(self.dir, m.file)
        with open(path, "w", encoding="utf-8") as f:
            f.write(m.debate_jsonl())
        self.run("ingest", "--scope", m.name, "--kind", "debate", m.file)
        self.run("compress", "--scope", m.name)

    def window(self, m: Meeting, budget: int, level: str = "auto", question: str | None = None) -> dict:
        args = ["--json", "context", "--scope", m.name, "--budget", str(budget)]
        if question is None:
            args += ["--level", level]
        else:
            args += [f"--for={question}"]
        out = self.run(*args)
        try:
            w = json.loads(out)
        except ValueError as e:
            raise RuntimeError(f"{m.name}: `strata {' '.join(args)}` printed no JSON window: {e}") from None
        self.windows += 1
        if ntok(w["text"]) != w["tokens"]:
            self.mismatches += 1
        if w["tokens"] > budget:
            raise RuntimeError(f"{m.name}: strata's window has {w['tokens']} tokens, over its budget {budget}")
        return w


# --- the run ------------------------------------------------------------------------------

ROUGE_METHODS = ["strata_auto", "lexrank", "textrank", "first_n", "last_n", "random"]
ROUGE_KEYS = ["rouge1", "rouge2", "rougeL"]


def split_digest(d: str) -> tuple[int, str]:
    names = sorted(n for n in os.listdir(d) if not n.startswith("."))
    lines = "".join(
        f"{hashlib.sha256(open(os.path.join(d, n), 'rb').read()).hexdigest()}  {n}\n" for n in names
    )
    return len(names), hashlib.sha256(lines.encode()).hexdigest()


def mean(xs):
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def main() -> int:
    try:
        return run()
    except RuntimeError as e:  # a strata command failed or broke a promise
        print(f"qmsum: ERROR: {e}", file=sys.stderr)
        return 1


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the directory scripts/fetch-qmsum.sh prints")
    ap.add_argument("--split", choices=["val", "test", "train"], default="val")
    ap.add_argument("--limit", type=int, default=0, help="the first N meetings (by name); 0 = all")
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument(
        "--auto-budgets",
        default="1000,2000",
        help="budgets of the unfocused windows judged by the queries' gold turns (c); empty = skip",
    )
    ap.add_argument("--strata", default="target/debug/strata", help="the strata binary")
    ap.add_argument("--workdir", default="target/qmsum-work")
    ap.add_argument("--out", help="the results JSON (default WORKDIR/results-SPLIT.json)")
    ap.add_argument("--for-impl", choices=["strata", "bm25-sentences", "none"], default="strata")
    ap.add_argument("--seed", type=int, default=7, help="the random-sentences baseline's seed")
    ap.add_argument("--turns-per-round", type=int, default=20)
    ap.add_argument("--no-strata", action="store_true", help="baselines only (no binary needed)")
    a = ap.parse_args()
    try:
        budgets = [int(b) for b in a.budgets.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or min(budgets) < 1:
        ap.error("--budgets: positive integers, comma-separated")
    try:
        auto_budgets = [int(b) for b in a.auto_budgets.split(",") if b.strip()]
    except ValueError:
        auto_budgets = [0]
    if auto_budgets and min(auto_budgets) < 1:
        ap.error("--auto-budgets: positive integers, comma-separated, or empty")

    global ENC
    ENC, cl100k_path = load_cl100k()
    t_start = time.time()

    split_dir = os.path.join(a.data, a.split)
    if not os.path.isdir(split_dir):
        sys.exit(f"qmsum: no directory {split_dir} (run scripts/fetch-qmsum.sh)")
    nfiles, digest = split_digest(split_dir)
    commit = ""
    if os.path.isfile(os.path.join(a.data, ".complete")):
        commit = open(os.path.join(a.data, ".complete")).read().strip()
    names = sorted(os.listdir(split_dir))
    names = [n for n in names if n.endswith(".json")]
    if a.limit:
        names = names[: a.limit]

    if not a.no_strata and not (os.path.isfile(a.strata) and os.access(a.strata, os.X_OK)):
        sys.exit(f"qmsum: no strata binary at {a.strata} (cargo build --locked, or --strata PATH, or --no-strata)")
    strata = None if a.no_strata else Strata(a.strata, a.workdir)
    for_impl = a.for_impl
    for_note = None
    if strata is None and for_impl == "strata":
        for_impl, for_note = "none", "--no-strata"
    if strata is not None and for_impl == "strata" and not strata.has_for():
        for_impl, for_note = "none", "this strata binary has no `context --for`"
        print(f"qmsum: {for_note}: the strata --for column is skipped", file=sys.stderr)
    os.makedirs(a.workdir, exist_ok=True)

    scorer = rouge_scorer.RougeScorer(ROUGE_KEYS, use_stemmer=True)
    per_meeting = []
    per_query = []
    timing = {k: 0.0 for k in ["strata_ingest_compress", "strata_auto", "strata_for", "bm25", "lexrank", "textrank", "mock_for"]}
    # Every meeting is in the store before any is asked: retrieval weighs words by the
    # whole store's statistics, so a meeting asked while later ones were still missing read
    # differently (a first run over a fresh store) from the same meeting asked over the full
    # store (as qmsum_query.py does).
    if strata is not None:
        for fname in names:
            with open(os.path.join(split_dir, fname), encoding="utf-8") as f:
                m = Meeting(fname[: -len(".json")], json.load(f), a.turns_per_round)
            t = time.time()
            strata.load(m)
            timing["strata_ingest_compress"] += time.time() - t
    for mi, fname in enumerate(names):
        name = fname[: -len(".json")]
        with open(os.path.join(split_dir, fname), encoding="utf-8") as f:
            m = Meeting(name, json.load(f), a.turns_per_round)
        t0 = time.time()
        row = {
            "meeting": name,
            "turns": len(m.turns),
            "empty_turns": len(m.turns) - len(m.live),
            "sentences": len(m.sentences),
            "transcript_tokens": ntok("\n".join(m.line(i) for i in m.live)),
            "summary_query": m.summary_query,
        }
        # (b) unfocused windows at the summary's length.
        n = ntok(m.summary)
        row["summary_tokens"] = n
        texts = {}
        if strata is not None:
            t = time.time()
            w = strata.window(m, n)
            timing["strata_auto"] += time.time() - t
            texts["strata_auto"] = w["text"]
            row["strata_auto_parts"] = sorted({nd.get("part", "") for nd in w["nodes"]})
        rankings = {}
        for key, cls in (("lexrank", RankedLexRank), ("textrank", RankedTextRank)):
            t = time.time()
            rankings[key] = sumy_ranking(cls, m)
            texts[key] = sentence_window(m, rankings[key], n)
            timing[key] += time.time() - t
        lex_rank, text_rank = rankings["lexrank"], rankings["textrank"]
        whole = "\n".join(m.line(i) for i in m.live)
        texts["first_n"] = cut_tokens(whole, n, tail=False)
        texts["last_n"] = cut_tokens(whole, n, tail=True)
        rng = random.Random(f"{a.seed}:{name}")
        shuffled = list(range(len(m.sentences)))
        rng.shuffle(shuffled)
        texts["random"] = sentence_window(m, shuffled, n)
        rouge = {}
        for key, text in texts.items():
            scored = strip_markup(text, m.speakers)
            s = scorer.score(m.summary, scored)
            rouge[key] = {k: s[k].fmeasure for k in ROUGE_KEYS}
            rouge[key]["tokens"] = ntok(text)
            rouge[key]["scored_tokens"] = ntok(scored)
        row["rouge"] = rouge

        # (c) unfocused windows at fixed budgets, judged by the turns the meeting's specific
        # queries mark relevant: does a window that knows no question keep what people ask about?
        if auto_budgets and m.queries:
            kept = {}
            for b in auto_budgets:
                wins = {}
                if strata is not None:
                    t = time.time()
                    wins["strata_auto"] = strata.window(m, b)["text"]
                    timing["strata_auto"] += time.time() - t
                wins["lexrank"] = sentence_window(m, lex_rank, b)
                wins["textrank"] = sentence_window(m, text_rank, b)
                wins["first_n"] = cut_tokens(whole, b, tail=False)
                wins["last_n"] = cut_tokens(whole, b, tail=True)
                wins["random"] = sentence_window(m, shuffled, b)
                per = {}
                for key, text in wins.items():
                    share, anyg, sents = [], [], []
                    for q in m.queries:
                        got, size = substantive_held(m, q["gold"], text)
                        if size:
                            k, n_sents = substantive_count_held(m, q["gold"], text)
                            share.append(got / size)
                            sents.append(k / n_sents)
                            anyg.append(1.0 if got else 0.0)
                    per[key] = {"share": share, "sentences": sents, "any": anyg}
                kept[str(b)] = per
            row["kept"] = kept

        # (a) question-focused windows.
        t = time.time()
        idx = TurnIndex(m)
        timing["bm25"] += time.time() - t
        sidx = SentenceIndex(m) if for_impl == "bm25-sentences" else None
        for qi, q in enumerate(m.queries):
            gold = q["gold"]
            rec = {"meeting": name, "query": q["query"], "gold_turns": len(gold), "budgets": {}}
            for b in budgets:
                r = {}
                t = time.time()
                packed = idx.packed(q["query"], b)
                timing["bm25"] += time.time() - t
                text = "\n".join(m.line(i) for i in sorted(packed))
                r["bm25"] = score(m, idx, gold, whole_turns(packed), text)
                t = time.time()
                filled = idx.packed(q["query"], b, fill=True)
                timing["bm25"] += time.time() - t
                text = "\n".join(m.line(i) for i in sorted(filled))
                r["bm25_fill"] = score(m, idx, gold, whole_turns(filled), text)
                ceil = pack(sorted(gold, key=lambda i: (ntok(m.line(i)), i)), lambda i: (i, m.line(i)), b)
                ceil_text = "\n".join(m.line(i) for i in sorted(ceil))
                r["ceiling"] = score(m, idx, gold, whole_turns(ceil), ceil_text)
                if for_impl != "none":
                    t = time.time()
                    if for_impl == "strata":
                        w = strata.window(m, b, question=q["query"])
                        timing["strata_for"] += time.time() - t
                    else:
                        w = sidx.window(q["query"], b)
                        timing["mock_for"] += time.time() - t
                    r["for"] = score(m, idx, gold, held_strict(w, m), w["text"])
                rec["budgets"][str(b)] = r
            per_query.append(rec)
        row["queries"] = len(m.queries)
        row["seconds"] = round(time.time() - t0, 2)
        per_meeting.append(row)
        print(
            f"qmsum: [{mi + 1}/{len(names)}] {name}: {len(m.turns)} turns, {len(m.queries)} queries, "
            f"summary {n} tokens, {row['seconds']} s",
            file=sys.stderr,
        )

    # Means: recall per query (held / gold), averaged over queries; ROUGE over meetings.
    for_name = {"strata": "strata", "bm25-sentences": "mock", "none": None}[for_impl]
    methods = ["bm25", "bm25_fill", "ceiling"] + (["for"] if for_name else [])
    recall = {}
    for b in budgets:
        rb = {}
        for meth in methods:
            strict = [
                rq["budgets"][str(b)][meth]["strict"] / rq["gold_turns"] for rq in per_query if rq["gold_turns"]
            ]
            text = [
                rq["budgets"][str(b)][meth]["text"] / rq["budgets"][str(b)][meth]["text_den"]
                for rq in per_query
                if rq["budgets"][str(b)][meth]["text_den"]
            ]
            toks = [rq["budgets"][str(b)][meth]["tokens"] for rq in per_query]
            share = [
                rq["budgets"][str(b)][meth]["gold_bytes_held"] / rq["budgets"][str(b)][meth]["gold_bytes"]
                for rq in per_query
                if rq["gold_turns"]
            ]
            # Some gold turn held verbatim: what an agent-memory benchmark asks of a window.
            hit = [1.0 if rq["budgets"][str(b)][meth]["strict"] else 0.0 for rq in per_query if rq["gold_turns"]]
            rb[for_name if meth == "for" else meth] = {
                "strict": mean(strict),
                "hit": mean(hit),
                "text": mean(text),
                "gold_text_share": mean(share),
                "mean_tokens": mean(toks),
                "queries": len(strict),
            }
        recall[str(b)] = rb
    kept_means = {}
    for b in auto_budgets:
        kb = {}
        for key in ROUGE_METHODS:
            rec = [x for r in per_meeting if "kept" in r and key in r["kept"][str(b)] for x in r["kept"][str(b)][key]["share"]]
            anyg = [x for r in per_meeting if "kept" in r and key in r["kept"][str(b)] for x in r["kept"][str(b)][key]["any"]]
            sents = [x for r in per_meeting if "kept" in r and key in r["kept"][str(b)] for x in r["kept"][str(b)][key]["sentences"]]
            if rec:
                kb[key] = {"share": mean(rec), "sentences": mean(sents), "any": mean(anyg), "queries": len(rec)}
        kept_means[str(b)] = kb
    rouge_means = {}
    for key in ROUGE_METHODS:
        rows = [r["rouge"][key] for r in per_meeting if key in r["rouge"]]
        if rows:
            rouge_means[key] = {k: mean([x[k] for x in rows]) for k in ROUGE_KEYS + ["tokens", "scored_tokens"]}
    elapsed = time.time() - t_start
    versions = {p: pkg_version(p) for p in ["sumy", "rouge-score", "rank-bm25", "tiktoken", "numpy", "nltk"]}
    versions["python"] = platform.python_version()
    if strata is not None:
        versions["strata"] = strata.version()
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        versions["strata_git"] = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        pass
    results = {
        "dataset": "QMSum (github.com/Yale-LILY/QMSum), data/ALL",
        "split": a.split,
        "commit": commit,
        "split_files": nfiles,
        "split_sha256": digest,
        "meetings": len(per_meeting),
        "queries": len(per_query),
        "settings": {
            "budgets": budgets,
            "auto_budgets": auto_budgets,
            "for_impl": for_impl,
            "for_note": for_note,
            "seed": a.seed,
            "turns_per_round": a.turns_per_round,
            "cleaning": "{word} markers removed, white space squeezed; empty turns dropped",
            "rouge": "rouge-score F1, use_stemmer=True, on text without '## ' lines and speaker/round labels",
            "cl100k_file": cl100k_path,
        },
        "versions": versions,
        "token_count_mismatches": None if strata is None else {"windows": strata.windows, "mismatched": strata.mismatches},
        "seconds": round(elapsed, 1),
        "timing_seconds": {k: round(v, 1) for k, v in timing.items()},
        "recall": recall,
        "rouge": rouge_means,
        "kept": kept_means,
        "per_meeting": per_meeting,
        "per_query": per_query,
    }
    out = a.out or os.path.join(a.workdir, f"results-{a.split}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
    print(f"qmsum: results in {out} ({elapsed:.0f} s)", file=sys.stderr)
    print(markdown(results))
    return 0


def pct(x):
    return "–" if x is None else f"{100 * x:.1f} %"


def markdown(r: dict) -> str:
    s = r["settings"]
    lines = [
        f"QMSum `{r['split']}` (commit {r['commit'][:7] or '?'}, split sha256 {r['split_sha256'][:12]}…): "
        f"{r['meetings']} meetings, {r['queries']} specific queries; {r['seconds']:.0f} s.",
        "",
        "Gold-turn recall of question-focused windows (mean over queries; strict = the turn's "
        "text is in the window verbatim, text = ≥ 50 % of its content words are):",
        "",
    ]
    budgets = [str(b) for b in s["budgets"]]
    meths = list(r["recall"][budgets[0]].keys())
    label = {
        "bm25": "BM25 turns, packed",
        "bm25_fill": "BM25 turns, then score-0 turns in transcript order",
        "strata": "strata `--for`",
        "mock": "MOCK `--for` (harness BM25 sentences; not strata)",
        "ceiling": "ceiling: gold turns, shortest first (reference)",
    }
    lines += [
        "| budget | method | strict | text | gold text held | any gold turn | window tokens |",
        "|--:|---|--:|--:|--:|--:|--:|",
    ]
    order = [m for m in ["strata", "mock", "bm25", "bm25_fill", "ceiling"] if m in meths]
    for b in budgets:
        for m in order:
            x = r["recall"][b][m]
            lines.append(
                f"| {int(b):,} | {label[m]} | {pct(x['strict'])} | {pct(x['text'])} "
                f"| {pct(x['gold_text_share'])} | {pct(x.get('hit'))} | {x['mean_tokens']:.0f} |"
            )
    lines += [
        "",
        "(any gold turn: the share of queries with at least one gold turn held strictly; "
        "gold text held: the share of the gold turns' bytes that are in the window verbatim, "
        "mean over queries.)",
    ]
    if s["for_impl"] == "none":
        lines += ["", f"(strata `--for`: not run — {s['for_note'] or '--for-impl none'}.)"]
    lines += [
        "",
        "ROUGE F1 against the human summary, every window cut to the summary's length in cl100k "
        "tokens (mean over meetings; labels and `##` lines not scored):",
        "",
        "| method | ROUGE-1 | ROUGE-2 | ROUGE-L | tokens | scored tokens |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    names = {
        "strata_auto": "strata `auto`",
        "lexrank": "LexRank (sumy)",
        "textrank": "TextRank (sumy)",
        "first_n": "first N tokens",
        "last_n": "last N tokens",
        "random": f"random sentences (seed {s['seed']})",
    }
    for k in ROUGE_METHODS:
        if k in r["rouge"]:
            x = r["rouge"][k]
            lines.append(
                f"| {names[k]} | {100 * x['rouge1']:.2f} | {100 * x['rouge2']:.2f} | {100 * x['rougeL']:.2f} "
                f"| {x['tokens']:.0f} | {x['scored_tokens']:.0f} |"
            )
    kept = r.get("kept") or {}
    if any(kept.values()):
        lines += [
            "",
            "Unfocused windows at fixed budgets, judged by the turns the meeting's specific queries "
            "mark relevant (their sentences of three content words or more, found verbatim in the "
            "window: gold text held = their bytes held, sentences held = their number held, "
            "some held = at least one held; mean over queries):",
            "",
            "| budget | method | gold text held | gold sentences held | queries with some held |",
            "|--:|---|--:|--:|--:|",
        ]
        for b, kb in kept.items():
            for k in ROUGE_METHODS:
                if k in kb:
                    lines.append(
                        f"| {int(b):,} | {names[k]} | {pct(kb[k]['share'])} | {pct(kb[k].get('sentences'))} "
                        f"| {pct(kb[k]['any'])} |"
                    )
    tm = r["token_count_mismatches"]
    if tm:
        lines += ["", f"strata windows: {tm['windows']}, token counts differing from tiktoken's: {tm['mismatched']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
