#!/usr/bin/env bash
# Prints the path of a python that can `import tokenizers` (HF), installing it into the venv
# build/pyenv with pip when needed. Order: $DS_HF_PYTHON, python3 on PATH, build/pyenv, a new
# build/pyenv.
# Exit 77 (with a message on stderr) only when pip cannot reach PyPI; other failures exit 1.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${DS_PYENV:-build/pyenv}
has_tok() { "$1" -c "import tokenizers" >/dev/null 2>&1; }
if [ -n "${DS_HF_PYTHON:-}" ] && has_tok "$DS_HF_PYTHON"; then echo "$DS_HF_PYTHON"; exit 0; fi
if command -v python3 >/dev/null && has_tok python3; then command -v python3; exit 0; fi
if [ -x "$VENV/bin/python" ] && has_tok "$VENV/bin/python"; then echo "$VENV/bin/python"; exit 0; fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" >&2 || { echo "hf_python: python3 -m venv failed (install python3-venv: scripts/setup.sh)" >&2; exit 1; }
fi
if "$VENV/bin/pip" install -q --disable-pip-version-check "tokenizers==0.23.3" >&2 ||
   "$VENV/bin/pip" install -q --disable-pip-version-check tokenizers >&2; then
  has_tok "$VENV/bin/python" && { echo "$VENV/bin/python"; exit 0; }
  echo "hf_python: tokenizers installed but not importable" >&2
  exit 1
fi
if ! "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import urllib.request
urllib.request.urlopen("https://pypi.org/simple/tokenizers/", timeout=15).read(1)
PY
then
  echo "SKIP: pip cannot reach PyPI to install HF tokenizers (set DS_HF_PYTHON to a python with tokenizers)" >&2
  exit 77
fi
echo "hf_python: pip install tokenizers failed although PyPI is reachable" >&2
exit 1
