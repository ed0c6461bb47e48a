#!/usr/bin/env python3
"""bench/ftfy_check.py - does ftfy.fix_text, the first step of AVION's tokenizer that tubelet
leaves out (docs/TEXT.md), change real captions, and does that change their token ids?

    /usr/bin/python3 -m venv --system-site-packages bench/venv-ftfy
    bench/venv-ftfy/bin/pip install ftfy==6.3.1
    bench/venv-ftfy/bin/python bench/ftfy_check.py CAPTIONS...

CAPTIONS: .csv files with a "narration" column (EPIC-Kitchens annotations), or text files with
one caption a line, the caption after the first tab if there is one (Flickr8k.token.txt).
For every distinct caption it compares fix_text's output with its input, and AVION's ids
(tests/ref/tokenizer_ref.py with and without fix_text, context 77). Then it shows what
fix_text does to a few strings of the kinds web captions carry, which real sets may not."""
import csv
import os
import sys
import unicodedata

import ftfy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import tokenizer_ref  # noqa: E402

MERGES = os.path.join(HERE, "..", "data", "bpe_simple_vocab_16e6.txt.gz")

# What fix_text's defaults act on, one string each (not counted with the real captions).
PROBES = [
    "it\u2019s a \u201cquoted\u201d word",    # uncurl_quotes
    "\ufb01ne \ufb02our",                      # fix_latin_ligatures
    "\uff26\uff55\uff4c\uff4c width",          # fix_character_width
    "cafe\u0301 (combining accent)",           # NFC
    "caf\u00c3\u00a9 (mojibake)",              # fix_encoding
    "&amp;amp;amp;lt; three times escaped",    # unescape_html (then html.unescape twice)
    "red \x1b[31mterminal\x1b[0m escape",      # remove_terminal_escapes
    "\ufeffbyte order mark, \x01 control",     # remove_control_chars
    "line\u2028separator",                     # fix_line_breaks
]


def read_captions(path):
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as f:
            return [row["narration"] for row in csv.DictReader(f)]
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1)[-1] for line in f if line.strip()]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = []
    for path in sys.argv[1:]:
        caps = read_captions(path)
        print("%-60s %7d captions" % (os.path.basename(path), len(caps)))
        rows += caps
    distinct = sorted(set(rows))
    plain = tokenizer_ref.Tokenizer(MERGES)
    fixed = tokenizer_ref.Tokenizer(MERGES, fix=ftfy.fix_text)
    changed = [c for c in distinct if ftfy.fix_text(c) != c]
    ids_changed = [c for c in changed if plain.tokenize(c, 77) != fixed.tokenize(c, 77)]
    non_ascii = sum(not c.isascii() for c in distinct)
    not_nfc = sum(unicodedata.normalize("NFC", c) != c for c in distinct)
    print("ftfy %s, Python %s" % (ftfy.__version__, sys.version.split()[0]))
    print("caption rows %d, distinct %d, distinct with non-ASCII %d, not NFC %d"
          % (len(rows), len(distinct), non_ascii, not_nfc))
    print("distinct captions fix_text changes: %d; whose ids (context 77) change: %d"
          % (len(changed), len(ids_changed)))
    for c in changed[:20]:
        print("  %r -> %r" % (c, ftfy.fix_text(c)))
    print("probes (what fix_text would change in web captions):")
    for p in PROBES:
        f = ftfy.fix_text(p)
        same = plain.tokenize(p, 77) == fixed.tokenize(p, 77)
        print("  %-44r -> %-40r ids %s" % (p, f, "same" if same else "differ"))


if __name__ == "__main__":
    main()
