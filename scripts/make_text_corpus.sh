#!/usr/bin/env bash
# Builds the >= 20 MiB mixed real-text corpus for the tokenizer comparison and benchmark, from
# files every Debian machine with the build dependencies has: /usr/share/doc (READMEs,
# copyrights, changelogs; .gz decompressed), /usr/include headers, man pages in every
# language under /usr/share/man (.gz decompressed; ja, ko, ru, zh, ... give non-Latin text),
# locale definitions (/usr/share/i18n) and the Python standard library.
# Deterministic: each source's files in sorted (byte) order, sources interleaved round-robin,
# each document = one file's text (valid UTF-8 only, cut to 64 KiB at a character boundary),
# stopping once the total reaches the target. The same files give the same corpus.
#
# usage: scripts/make_text_corpus.sh [OUT.jsonl] [TARGET_BYTES]
#   OUT.jsonl defaults to build/tokenizer_corpus/corpus.jsonl; TARGET_BYTES to 20 MiB + 1 MiB.
# Prints: documents, bytes, sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/tokenizer_corpus/corpus.jsonl}
TARGET=${2:-$((21 * 1024 * 1024))}
mkdir -p "$(dirname "$OUT")"
python3 - "$OUT" "$TARGET" <<'PY'
import gzip, hashlib, json, os, sys

out_path, target = sys.argv[1], int(sys.argv[2])
MAX_DOC = 64 * 1024

def files(root, keep):
    found = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p) and keep(p):
                found.append(p)
    found.sort(key=lambda s: s.encode("utf-8", "surrogateescape"))
    return found

def text_doc(p):
    ext_ok = ("", ".txt", ".md", ".rst", ".html", ".gz", ".py", ".h", ".hpp")
    return os.path.splitext(p)[1] in ext_ok

sources = [
    files("/usr/share/doc", text_doc),
    files("/usr/include", lambda p: p.endswith((".h", ".hpp"))),
    files("/usr/share/man", lambda p: p.endswith(".gz")),
    files("/usr/share/i18n/locales", lambda p: True),
    files("/usr/lib/python3.11", lambda p: p.endswith(".py") and "/site-packages/" not in p),
]

def read(p):
    try:
        with open(p, "rb") as f:
            raw = f.read(4 * MAX_DOC)
        if p.endswith(".gz"):
            raw = gzip.decompress(raw) if len(raw) < 4 * MAX_DOC else b""
        s = raw.decode("utf-8")
    except Exception:
        return None
    if "\x00" in s or not s.strip():
        return None
    out = s[:MAX_DOC]
    while len(out.encode("utf-8")) > MAX_DOC:
        out = out[: len(out) - 1024]
    return out

total, ndocs = 0, 0
h = hashlib.sha256()
iters = [iter(s) for s in sources]
with open(out_path, "w", encoding="utf-8") as f:
    while total < target and iters:
        for it in list(iters):
            p = next(it, None)
            if p is None:
                iters.remove(it)
                continue
            s = read(p)
            if s is None:
                continue
            line = json.dumps({"text": s}, ensure_ascii=False) + "\n"
            f.write(line)
            h.update(line.encode("utf-8"))
            total += len(s.encode("utf-8"))
            ndocs += 1
            if total >= target:
                break
print(json.dumps({"corpus": out_path, "documents": ndocs, "text_bytes": total,
                  "sha256": h.hexdigest()}))
PY
