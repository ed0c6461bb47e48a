#!/usr/bin/python3
"""tests/ref/tokenizer_ref.py - the Python twin of tubelet's CLIP tokenizer (src/data/
tokenizer.c), for tests/test_tokenizer.c: AVION's tokenizer (avion/data/tokenizer.py, OpenAI
CLIP's simple_tokenizer with open_clip's special tokens) written out again for the test, minus
ftfy.fix_text, which Debian does not package (fix=ftfy.fix_text in Tokenizer puts it back, for
bench/ftfy_check.py). Needs only Debian's python3 and python3-regex.

    /usr/bin/python3 tests/ref/tokenizer_ref.py --merges FILE.gz --contexts 77,5 IN OUT

IN holds the captions as UTF-8, each followed by a NUL byte. OUT gets, for each caption and then
for each context length C, one line "C N id id ..." with the C ids of AVION's tokenize() (start,
tokens, end, zeros; cut to C with the end token kept last) and N the length before the cut."""
import argparse
import gzip
import html

import regex

START, END = "<start_of_text>", "<end_of_text>"


def byte_alphabet():
    """bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
    U+0100 onwards; this order is the order of the first 256 tokens."""
    keep = [b for b in range(256)
            if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    rest = [b for b in range(256) if b not in keep]
    return {b: chr(b) for b in keep} | {b: chr(256 + i) for i, b in enumerate(rest)}, keep + rest


class Tokenizer:
    def __init__(self, merges_path, fix=None):
        self.fix = fix
        self.byte_char, order = byte_alphabet()
        with gzip.open(merges_path) as f:
            lines = f.read().decode("utf-8").split("\n")
        pairs = [tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1]]
        tokens = [self.byte_char[b] for b in order]
        tokens += [t + "</w>" for t in tokens]
        tokens += ["".join(p) for p in pairs]
        tokens += [START, END]
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.rank = {p: i for i, p in enumerate(pairs)}
        self.special = {START: START, END: END}
        self.pattern = regex.compile(
            START + "|" + END + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
            regex.IGNORECASE)

    def merge(self, word):
        """Byte-pair encode one piece (already spelled in the byte alphabet): join the
        lowest-ranked adjacent pair everywhere it occurs, left to right, until none is left."""
        if word in self.special:
            return [word]
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            ranked = [(self.rank[p], p) for p in zip(parts, parts[1:]) if p in self.rank]
            if not ranked:
                break
            first, second = min(ranked)[1]
            joined, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == first and parts[i + 1] == second:
                    joined.append(first + second)
                    i += 2
                else:
                    joined.append(parts[i])
                    i += 1
            parts = joined
        return parts

    def clean(self, text):
        if self.fix:
            text = self.fix(text)
        text = html.unescape(html.unescape(text)).strip()
        return regex.sub(r"\s+", " ", text).strip().lower()

    def encode(self, text):
        out = []
        for piece in self.pattern.findall(self.clean(text)):
            spelled = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            out += [self.ids[t] for t in self.merge(spelled)]
        return out

    def tokenize(self, text, context):
        """AVION's tokenize(): [start] + tokens + [end], cut to context with end kept last."""
        full = [self.ids[START]] + self.encode(text) + [self.ids[END]]
        cut = full[:context]
        if len(full) > context:
            cut[-1] = self.ids[END]
        return len(full), cut + [0] * (context - len(cut))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--merges", required=True)
    ap.add_argument("--contexts", default="77")
    ap.add_argument("input")
    ap.add_argument("output")
    a = ap.parse_args()
    tok = Tokenizer(a.merges)
    contexts = [int(c) for c in a.contexts.split(",")]
    with open(a.input, "rb") as f:
        captions = f.read().split(b"\0")[:-1]
    with open(a.output, "w") as out:
        for cap in captions:
            text = cap.decode("utf-8")
            for c in contexts:
                n, ids = tok.tokenize(text, c)
                out.write("%d %d %s\n" % (c, n, " ".join(map(str, ids))))


if __name__ == "__main__":
    main()
