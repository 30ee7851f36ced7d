#!/usr/bin/env python3
"""Generates the tokenizer golden files under tests/data/tokenizer/ from the reference
implementation (Hugging Face `tokenizers` + `transformers`).

Run with the reference environment:
    /opt/refenv/bin/python scripts/make_tokenizer_goldens.py [--model ../shared/models/deepseek-v3]

Writes (deterministic: fixed seeds, no clock):
  corpus.jsonl         one {"text", "ids", "ids_no_special"} per string (>= 400 strings);
                       ids = encode(text, add_special_tokens=False),
                       ids_no_special = the same with special tokens in the text not parsed
                       (tokenizer.encode_special_tokens = True)
  decode.jsonl         {"ids", "text", "text_skip_special"}: HF decode of id sequences
                       (byte fragments, special tokens, invalid UTF-8)
  unicode_sweep.json   per 4096-code-point block, an FNV-1a-64 hash of the ids of a string
                       that puts every code point of the block in several contexts
  chat_template.jsonl  {"name", "messages", "add_generation_prompt", "text", "ids"} from
                       transformers' apply_chat_template (AutoTokenizer from the model dir)
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def fnv1a64_ids(ids):
    h = 1469598103934665603
    for i in ids:
        for c in (str(i) + ",").encode():
            h ^= c
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def sweep_text(start, end):
    parts = []
    for cp in range(start, end):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        parts.append("a" + ch + "b " + ch + " 1" + ch + "2." + ch + "\n" + ch + ch)
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------
HAND = [
    # English, punctuation, contractions
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "I'm here; you're there. We'll see.",
    "  leading spaces", "trailing spaces   ", "multiple   internal    spaces", "",
    " ", "a", "A", "Hello", " Hello", "hello\n", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "line1\r\nline2\r\n",
    "tab\there", "\t", "\t\t\tindent", "mixed \t \n \r\n whitespace", "word\n\n\nword", "x  \n  y",
    "e.g. i.e. etc.", "U.S.A.", "don't can't won't shouldn't", "'s 't 're 've 'm 'll 'd", "'Quoted' \"double\"",
    "...", "!!!???", "---", "___", "***bold***", "#hashtag @mention $dollar %percent ^caret &amp",
    # Chinese
    "你好世界", "我爱北京天安门。", "深度求索（DeepSeek）是一家人工智能公司。", "今天天气很好，我们去公园散步吧！",
    "中文，标点；符号：“引号”‘单引号’《书名号》【括号】", "繁體中文與簡體中文", "龘靐齉爩", "㐀㐁㐂 𠀀𠀁 𪚥",
    "价格是100元，折扣20%。", "2024年1月1日", "第3章 第12节", "一二三四五六七八九十",
    # Japanese
    "こんにちは世界", "カタカナとひらがな", "日本語のテキストです。", "ｶﾀｶﾅ 半角カナ", "東京都渋谷区", "ゔゕゖ ー〜",
    "私はDeepSeekを使っています", "アイウエオ・カキクケコ",
    # Korean
    "안녕하세요 세계", "한국어 텍스트입니다.", "대한민국 서울특별시", "ᄀᄁᄂ 자모", "한글과 English 혼합",
    # Emoji
    "😀", "😀😃😄😁", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇺🇸🇨🇳🇯🇵🇰🇷", "🇪🇺", "❤️", "✌🏿", "🧑‍🤝‍🧑",
    "I love 🍕 and 🍣!", "emoji🙂inside", "🫠🫨🩷", "#️⃣ 1️⃣ *️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    # Combining marks
    "e\u0301", "cafe\u0301", "n\u0303", "a\u0300\u0301\u0302\u0303", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034d",
    "\u0301alone", " \u0301", "1\u0301", "\u05e9\u05c1\u05b8", "\u0915\u094d\u0937",
    # Arabic / Hebrew
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "العربية ١٢٣٤٥٦٧٨٩٠", "שלום עולם", "mixed عربي and English",
    # Hindi / Indic
    "नमस्ते दुनिया", "हिन्दी भाषा", "भारत १२३", "தமிழ் மொழி", "বাংলা ভাষা", "ગુજરાતી",
    # Thai / SE Asian
    "สวัสดีชาวโลก", "ภาษาไทย", "ไทย๑๒๓", "Tiếng Việt có dấu", "ພາສາລາວ", "ខ្មែរ",
    # Cyrillic / Greek / others
    "Привет, мир!", "Ελληνικά γράμματα", "Ünïcödé çhàrs", "Straße", "ǅǈǋ", "ﬁﬂ ligatures", "İstanbul ıi",
    "Ꭰꭰ Cherokee", "ᚠᛇᚻ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙", "ℌℑℜ",
    # Fullwidth
    "ＡＢＣ ａｂｃ", "１２３４５", "ｈｅｌｌｏ，ｗｏｒｌｄ！", "（全角括号）", "　ideographic space　", "＠＃＄％",
    # Code
    "def f(x):\n    return x * 2\n", "int main() {\n\treturn 0;\n}\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "const x = () => { console.log(`template ${x}`); };", "#include <stdio.h>\n", "SELECT * FROM users WHERE id = 42;",
    "if __name__ == '__main__':\n    main()", "x=1;y=2;z=x+y", "    \n    \n", "class Foo(Bar):\n    pass",
    "std::vector<std::string> v{\"a\", \"b\"};", "$ ls -la | grep .py", "fn main() -> Result<(), Box<dyn Error>> {}",
    "<div class=\"x\">text</div>", "// comment\n/* block */", "a->b->c", "x >>= 1; y <<= 2;", "i++ --j",
    "\tif (x) {\r\n\t\ty();\r\n\t}\r\n",
    # URLs / emails / paths
    "https://www.example.com/path?query=1&b=2#frag", "http://localhost:8080/v1/chat/completions",
    "mailto:someone@example.org", "/usr/share/doc/README.md", "C:\\Windows\\System32", "ftp://ftp.debian.org/debian/",
    "git@github.com:deepseek-ai/DeepSeek-V3.git", "www.deepseek.com",
    # JSON
    '{"key": "value", "num": 123, "arr": [1, 2, 3], "nested": {"a": null, "b": true}}',
    '[{"name":"get_weather","arguments":{"city":"Beijing"}}]', '{"emoji": "😀", "cjk": "中文"}',
    '{\n  "a": 1,\n  "b": [\n    2,\n    3\n  ]\n}', '"\\u00e9\\n\\t"',
    # Math
    "E = mc^2", "∫₀^∞ e^{-x²} dx = √π/2", "∀x ∈ ℝ, x² ≥ 0", "α + β = γ", "a² + b² = c²", "1/2 + 1/3 = 5/6",
    "\\frac{a}{b} + \\sum_{i=1}^{n} i", "3.14159265358979", "-42", "+1e-10", "1,000,000", "0x1F 0b1010 0o17",
    "≤ ≥ ≠ ≈ ∞ ∑ ∏ √ ∂ ∇", "½ ¼ ¾ ⅓", "①②③ ⅠⅡⅢ", "x₁ x₂ x³", "$\\alpha$ and $$\\beta$$",
    # Special tokens in text
    "<｜begin▁of▁sentence｜>Hello", "Hi<｜end▁of▁sentence｜>", "<｜User｜>What is 1+1?<｜Assistant｜>2<｜end▁of▁sentence｜>",
    "<|EOT|>", "text<|EOT|>text", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    "<｜fim▁begin｜>def f():<｜fim▁hole｜>return 1<｜fim▁end｜>", "<｜place▁holder▁no▁5｜>", "<｜place▁holder▁no▁799｜>x",
    "<｜User", "<｜User｜", "｜User｜>", "<<｜User｜>>", "<｜▁pad▁｜><｜▁pad▁｜>", " <｜User｜> ", "<think>\nreasoning\n</think>\n\nanswer",
    "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>42<｜tool▁output▁end｜><｜tool▁outputs▁end｜>",
    # Misc Unicode
    "\u00a0nbsp\u00a0", "zero\u200bwidth", "\ufeffBOM", "soft\u00adhyphen", "\u2028line sep\u2029para", "\u180emongolian",
    "\u0085next line", "\x0bvt\x0cff", "\x00nul\x01ctl\x7f", "\u2066isolate\u2069", "bidi\u202eoverride",
    "⌘⌥⇧", "©®™", "€£¥₹₿", "♠♣♥♦", "←↑→↓", "█▓▒░", "☃☂☀", "\U0001F600\U0001F64F", "\U000E0041tag",
    "\U0010FFFF", "\ue000private", "\U0001D11E music", "̸̵̴", "ꙮ", "\u0e01\u0e34\u0e4a",
]


def digits_cases():
    out = []
    for n in range(1, 41):
        s = "".join(str((i * 7 + 3) % 10) for i in range(n))
        out.append(s)
        if n <= 12:
            out.append("abc" + s + "def")
            out.append(" " + s + " ")
    out += ["1.5", "12.345", "3,14", "١٢٣٤", "१२३४५", "๑๒๓๔", "１２３４５６７", "²³¹", "¼½", "Ⅻ", "①②", "𝟙𝟚𝟛",
            "2024-01-01T12:34:56Z", "v1.2.3", "192.168.1.1", "+86 138 0013 8000", "$1,234.56", "50%", "1e10", "0.000001"]
    return out


def whitespace_cases():
    out = []
    for n in range(1, 17):
        out.append(" " * n)
        out.append(" " * n + "x")
        out.append("x" + " " * n + "y")
    for s in ["\t\t", " \t ", "\n \n", "  \n  \n", " \r\n ", "\r\n\r\n\r\n", "\n\r", "\r\r", "a\r\nb", "a \r\n b",
              "\u3000\u3000", "\u00a0\u00a0", " \u00a0 ", "\u2003em", "x\u2009y", "\t\n\t\n", "end with space ",
              "end with newline\n", "   \n", "\n   ", "a\n\n\n\nb", "x\t\ty", "\v\f"]:
        out.append(s)
    return out


def long_cases():
    return ["a" * 1000, "ab" * 400, "😀" * 100, "你" * 500, " " * 500, "-" * 300, "1234567890" * 50,
            "\n" * 200, "word " * 300, "の" * 300, "Лорем ипсум " * 80, "=" * 120 + "\n", "\t" * 64,
            "ア" * 200 + "漢字" * 100, "👨‍👩‍👧‍👦" * 30, "é" * 200, "a\u0301" * 200,
            "".join(chr(0x4e00 + i) for i in range(0, 2000, 3))]


FRAGS = None


def random_cases(rng, n):
    pool = [s for s in HAND if s]
    out = []
    for _ in range(n):
        k = rng.randint(2, 6)
        seps = ["", " ", "\n", "  ", "\t", "\r\n", ", ", "。"]
        s = ""
        for j in range(k):
            frag = rng.choice(pool)
            if len(frag) > 40:
                a = rng.randint(0, len(frag) - 20)
                frag = frag[a:a + rng.randint(5, 30)]
            s += frag + rng.choice(seps)
        out.append(s)
    # random code points from interesting ranges
    ranges = [(0x20, 0x7f), (0xa0, 0x2ff), (0x300, 0x36f), (0x370, 0x52f), (0x590, 0x6ff), (0x900, 0xdff),
              (0xe00, 0xeff), (0x1100, 0x11ff), (0x2000, 0x2bff), (0x3000, 0x30ff), (0x4e00, 0x9fff),
              (0xac00, 0xd7a3), (0xff00, 0xffef), (0x1f300, 0x1faff), (0x20000, 0x2a6df)]
    for _ in range(n // 2):
        s = ""
        for _ in range(rng.randint(3, 40)):
            a, b = rng.choice(ranges)
            s += chr(rng.randint(a, b - 1))
        out.append(s)
    return out


def build_corpus():
    rng = random.Random(20260429)
    corpus = list(HAND) + digits_cases() + whitespace_cases() + long_cases() + random_cases(rng, 120)
    seen, uniq = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


# ---------------------------------------------------------------------------------------------
# Chat conversations
# ---------------------------------------------------------------------------------------------
def tc(name, args, i=0):
    return {"id": "call_%d" % i, "type": "function", "function": {"name": name, "arguments": args}}


CHATS = [
    ("single_user", [{"role": "user", "content": "Hello!"}], True),
    ("single_user_no_gen", [{"role": "user", "content": "Hello!"}], False),
    ("system_user", [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "What is 2+2?"}], True),
    ("two_systems_joined", [{"role": "system", "content": "Rule one."}, {"role": "system", "content": "Rule two."},
                            {"role": "user", "content": "Go."}], True),
    ("system_in_middle", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                          {"role": "system", "content": "Late system."}, {"role": "user", "content": "Again"}], True),
    ("multi_turn", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."},
                    {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another?"},
                    {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Thanks"}], True),
    ("multi_turn_ends_assistant", [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}], False),
    ("cjk", [{"role": "system", "content": "你是一个乐于助人的助手。"}, {"role": "user", "content": "请用中文介绍一下北京。"},
             {"role": "assistant", "content": "北京是中国的首都。"}, {"role": "user", "content": "日本語でもお願いします 😀"}], True),
    ("tool_call_single", [{"role": "user", "content": "Weather in Paris?"},
                          {"role": "assistant", "content": None, "tool_calls": [tc("get_weather", '{"city": "Paris"}')]},
                          {"role": "tool", "content": '{"temp_c": 18}'},
                          {"role": "assistant", "content": "It is 18°C in Paris."}], True),
    ("tool_call_pending_output", [{"role": "user", "content": "Weather?"},
                                  {"role": "assistant", "content": None, "tool_calls": [tc("get_weather", '{"city": "Rome"}')]},
                                  {"role": "tool", "content": "sunny"}], True),
    ("two_tool_calls", [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in A and B"},
                        {"role": "assistant", "content": None,
                         "tool_calls": [tc("get_weather", '{"city": "A"}'), tc("get_weather", '{"city": "B"}', 1)]},
                        {"role": "tool", "content": "A: 10C"}, {"role": "tool", "content": "B: 20C"},
                        {"role": "assistant", "content": "A is 10C, B is 20C."}, {"role": "user", "content": "ok"}], True),
    ("two_tool_rounds", [{"role": "user", "content": "Step 1"},
                         {"role": "assistant", "content": None, "tool_calls": [tc("f", "{}")]},
                         {"role": "tool", "content": "r1"}, {"role": "assistant", "content": "done 1"},
                         {"role": "user", "content": "Step 2"},
                         {"role": "assistant", "content": None, "tool_calls": [tc("g", '{"x": [1, 2]}')]},
                         {"role": "tool", "content": "r2"}, {"role": "assistant", "content": "done 2"}], True),
    ("tool_args_multiline", [{"role": "user", "content": "Write code"},
                             {"role": "assistant", "content": None,
                              "tool_calls": [tc("run_python", '{\n  "code": "print(1)\\nprint(2)"\n}')]},
                             {"role": "tool", "content": "1\n2\n"}], False),
    ("special_tokens_in_content", [{"role": "user", "content": "What does <｜User｜> mean? And <|EOT|>?"}], True),
    ("empty_contents", [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                        {"role": "assistant", "content": ""}, {"role": "user", "content": ""}], True),
    ("think_in_history", [{"role": "user", "content": "1+1?"},
                          {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n2"},
                          {"role": "user", "content": "2+2?"}], True),
    ("code_and_whitespace", [{"role": "system", "content": "  You are a coder.\n\n"},
                             {"role": "user", "content": "def f(x):\n\treturn x\r\n\n# fix this   "},
                             {"role": "assistant", "content": "```python\ndef f(x):\n    return x\n```"},
                             {"role": "user", "content": "👨‍👩‍👧‍👦 🇺🇸 e\u0301 مرحبا नमस्ते สวัสดี ＡＢＣ"}], True),
    ("tool_then_user", [{"role": "user", "content": "x"},
                        {"role": "assistant", "content": None, "tool_calls": [tc("f", '{"a":1}')]},
                        {"role": "tool", "content": "out"}, {"role": "user", "content": "and then?"}], True),
]


# ---------------------------------------------------------------------------------------------
# Variants of the DeepSeek tokenizer.json that exercise the other options HF implements
# (pre-tokenizer behaviours, Digits, ByteLevel regex/prefix space, added-token flags). The
# C++ test applies the same patch to the real file and compares with these ids.
# ---------------------------------------------------------------------------------------------
def split(regex, behavior, invert=False):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": invert}


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
VARIANTS = [
    ("gpt2_bytelevel", {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                          "use_regex": True}}),
    ("bytelevel_no_prefix", {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                               "use_regex": True}}),
    ("digits_individual", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BL]}}),
    ("digits_contiguous", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False}, BL]}}),
    ("split_removed", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\s+", "Removed"), BL]}}),
    ("split_merged_prev", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\s", "MergedWithPrevious"), BL]}}),
    ("split_merged_next", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\s", "MergedWithNext"), BL]}}),
    ("split_contiguous", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\p{P}", "Contiguous"), BL]}}),
    ("split_invert", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\p{L}+", "Isolated", True), BL]}}),
    ("split_string", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": ", "}, "behavior": "MergedWithPrevious", "invert": False}, BL]}}),
    ("onig_classes", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(r"\w+|\s+|\h+|\d+", "Isolated"), BL]}}),
    ("added_lstrip_rstrip", {"added_tokens_flags": {"<｜User｜>": {"lstrip": True, "rstrip": True},
                                                    "<｜Assistant｜>": {"lstrip": True},
                                                    "<｜tool▁sep｜>": {"rstrip": True}}}),
    ("added_single_word", {"added_tokens_flags": {"<｜User｜>": {"single_word": True},
                                                  "<|EOT|>": {"single_word": True}}}),
    # Ids as HF assigns them: an added token already in the vocab keeps its vocab id, new ones
    # follow the last id.
    ("added_new_tokens", {"added_tokens_extra": [
        {"id": 33310, "content": "hello", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": 128815, "content": "hello world", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        {"id": 128816, "content": "<think>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": 128817, "content": "</think>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
        {"id": 128818, "content": "<｜User｜>x", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False}]}),
]

VARIANT_TEXTS = [
    "Hello world", " Hello  world ", "hello world hello", "say hello world, hello", "abc 12345 def 6789012",
    "x, y, z , w", "  spaced   out\tand\nnewlines\r\n", "Mixed 中文 and 日本語 123", "<｜User｜>hi<｜Assistant｜>ok",
    "a <｜User｜> b", "a  <｜User｜>  b <｜Assistant｜>  c", "x<｜User｜>y", "中<｜User｜>文", "_<|EOT|>_", " <|EOT|> ",
    "f<｜tool▁sep｜>  g", "<think>\nhmm\n</think>\n\nanswer", "<｜User｜>xy", "héllo wörld", "deadBEEF 0x1f ff",
    "punct!!! ... ?? ok", "e\u0301 \u00a0 \u3000 x", "don't stop", "٣٤٥ ½ ²", "emoji 😀👍🏽 here", "word_with_under_score",
]


def apply_variant(tj, patch):
    tj = json.loads(json.dumps(tj))
    if "pre_tokenizer" in patch:
        tj["pre_tokenizer"] = patch["pre_tokenizer"]
    for a in tj["added_tokens"]:
        a.update(patch.get("added_tokens_flags", {}).get(a["content"], {}))
    tj["added_tokens"] += patch.get("added_tokens_extra", [])
    return tj


# ---------------------------------------------------------------------------------------------
# Other chat templates, for the Jinja subset interpreter (rendered in transformers' Jinja
# environment: sandboxed, trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False)).
# ---------------------------------------------------------------------------------------------
R1_STYLE = ("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
            "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
            "{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}"
            "{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}"
            "{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
            "{{'<｜User｜>' + message['content']}}{%- endif %}"
            "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
            "{% set content = message['content'] %}{% if '</think>' in content %}"
            "{% set content = content.split('</think>')[-1] %}{% endif %}"
            "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}"
            "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}")

CHATML_TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls | default([]) %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('unknown role ' ~ message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

LLAMA_STYLE = """{{- bos_token }}
{#- a comment #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{%- set n_user = messages | selectattr('role', 'equalto', 'user') | list | length %}
<|start_header_id|>system<|end_header_id|>

Users: {{ n_user }}; tools: {{ tools | length if tools else 0 }}; flag={{ (n_user > 1) }} {{ none }} {{ [1, 'a', none, true] }} {{ {'k': 2.5} }}
{{ system_message }}<|eot_id|>
{% for message in messages %}
  {% if loop.first %}[first {{ loop.index }}/{{ loop.length }}]{% endif %}
  <|start_header_id|>{{ message['role'] | upper }}<|end_header_id|>

{{ message['content'] | default('', true) | trim }}{{ ' (last)' if loop.last else '' }}<|eot_id|>
  {%- if message.tool_calls is defined and message.tool_calls %}
    {%- for tc in message.tool_calls %}{{ tc.function.name ~ '(' ~ tc.function.arguments ~ ')' }}{% if not loop.last %}, {% endif %}{% endfor %}
  {%- endif %}
{% endfor %}
{%- if add_generation_prompt -%}
<|start_header_id|>assistant<|end_header_id|>{{ '\\n\\n' }}
{%- endif %}
{{- (messages | map(attribute='role') | join(',')) ~ ' ' ~ ('x' * 3) ~ ' ' ~ (7 // 2) ~ ' ' ~ (7 % 3) ~ ' ' ~ 'A-b-C'.split('-') | join('+') ~ ' ' ~ '  pad  '.strip() ~ '|' ~ 'abc'[1:] ~ '|' ~ 'abcdef'[::-1] }}
{%- for k, v in {'a': 1, 'b': [2, 3]}.items() %} {{ k }}={{ v | tojson }}{% endfor %}
{{ tools | tojson(indent=2) if tools else 'no tools' }}
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather; \"quoted\" and 中文",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}}]



def r1_from_v3(v3):
    """The R1 form of the local DeepSeek-V3 template: assistant history keeps only the text
    after </think>, and the generation prompt opens <think> (as the R1 releases do)."""
    old_asst = "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    new_asst = ("{% set content = message['content'] %}{% if '</think>' in content %}"
                "{% set content = content.split('</think>')[-1] %}{% endif %}"
                "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")
    old_gen = "{{'<｜Assistant｜>'}}{% endif %}"
    assert old_asst in v3 and v3.endswith(old_gen)
    return v3.replace(old_asst, new_asst)[:-len(old_gen)] + "{{'<｜Assistant｜><think>\\n'}}{% endif %}"


JINJA_TEMPLATES = [("r1_style", R1_STYLE), ("chatml_tools", CHATML_TOOLS), ("llama_style", LLAMA_STYLE)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models", "deepseek-v3"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tokenizer"))
    args = ap.parse_args()
    from tokenizers import Tokenizer
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    tok_ns = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    tok_ns.encode_special_tokens = True

    corpus = build_corpus()
    with open(os.path.join(args.out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for s in corpus:
            ids = tok.encode(s, add_special_tokens=False).ids
            ids_ns = tok_ns.encode(s, add_special_tokens=False).ids
            assert tok.decode(ids, skip_special_tokens=False) == s, repr(s)
            f.write(json.dumps({"text": s, "ids": ids, "ids_no_special": ids_ns}, ensure_ascii=False) + "\n")
    print("corpus.jsonl: %d strings" % len(corpus))

    # Decode cases: id runs cut at arbitrary points (broken UTF-8), special ids, out-of-range.
    rng = random.Random(7)
    dec = []
    for s in corpus[:300]:
        ids = tok.encode(s, add_special_tokens=False).ids
        if not ids:
            continue
        a = rng.randint(0, len(ids) - 1)
        b = rng.randint(a + 1, len(ids))
        dec.append(ids[a:b])
    byte_ids = [tok.token_to_id(c) for c in ["\u0120", "\u00e4", "\u00b8", "\u0142", "\u00f0", "\u0141"]]
    for _ in range(60):
        seq = [rng.choice(byte_ids + [0, 1, 128803, 128805, rng.randint(3, 127999)]) for _ in range(rng.randint(1, 12))]
        dec.append(seq)
    dec.append([0, 1, 2, 128000, 128814, 128815, 999999])
    with open(os.path.join(args.out, "decode.jsonl"), "w", encoding="utf-8") as f:
        for ids in dec:
            f.write(json.dumps({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                                "text_skip_special": tok.decode(ids, skip_special_tokens=True)},
                               ensure_ascii=False) + "\n")
    print("decode.jsonl: %d cases" % len(dec))

    # Variants.
    with open(os.path.join(args.model, "tokenizer.json"), encoding="utf-8") as f:
        base = json.load(f)
    with open(os.path.join(args.out, "variants.jsonl"), "w", encoding="utf-8") as f:
        for name, patch in VARIANTS:
            vt = Tokenizer.from_str(json.dumps(apply_variant(base, patch)))
            cases = [{"text": t, "ids": vt.encode(t, add_special_tokens=False).ids} for t in VARIANT_TEXTS + corpus[:150]]
            f.write(json.dumps({"name": name, "patch": patch, "cases": cases}, ensure_ascii=False) + "\n")
    print("variants.jsonl: %d variants x %d texts" % (len(VARIANTS), len(VARIANT_TEXTS) + 150))

    # Unicode sweep.
    blocks = []
    for start in range(0, 0x110000, 4096):
        text = sweep_text(start, start + 4096)
        ids = tok.encode(text, add_special_tokens=False).ids
        blocks.append({"start": start, "end": start + 4096, "num_ids": len(ids), "fnv1a64": fnv1a64_ids(ids)})
    with open(os.path.join(args.out, "unicode_sweep.json"), "w") as f:
        json.dump({"generator": "scripts/make_tokenizer_goldens.py", "tokenizers": tokenizers.__version__,
                   "context": "a{c}b {c} 1{c}2.{c}\\n{c}{c} per code point (surrogates skipped)",
                   "blocks": blocks}, f, indent=0)
    print("unicode_sweep.json: %d blocks" % len(blocks))

    # Chat template.
    # transformers 5.x apply_chat_template drops None-valued message keys before rendering, so
    # an assistant tool-call message ({"content": None, "tool_calls": [...]}) no longer reaches
    # the template's `message['content'] is none` branch and the render fails. For those
    # conversations the template is rendered in the same Jinja environment transformers builds
    # (its _compile_jinja_template: sandboxed, trim_blocks, lstrip_blocks) with the messages as
    # given, which is what transformers 4.x and vLLM do; every other conversation must give the
    # same text both ways (asserted).
    from transformers.utils.chat_template_utils import _compile_jinja_template
    at = AutoTokenizer.from_pretrained(args.model)
    compiled = _compile_jinja_template(at.chat_template)
    with open(os.path.join(args.out, "chat_template.jsonl"), "w", encoding="utf-8") as f:
        for name, msgs, gen in CHATS:
            direct = compiled.render(messages=msgs, add_generation_prompt=gen, bos_token=at.bos_token,
                                     eos_token=at.eos_token)
            has_none = any(v is None for m in msgs for v in m.values())
            if has_none:
                text, source = direct, "jinja2 (transformers environment, None kept)"
            else:
                text = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
                assert text == direct, name
                source = "transformers.apply_chat_template"
            ids = at(text, add_special_tokens=False)["input_ids"]
            assert ids == tok.encode(text, add_special_tokens=False).ids, name
            f.write(json.dumps({"name": name, "messages": msgs, "add_generation_prompt": gen, "text": text,
                                "ids": ids, "source": source}, ensure_ascii=False) + "\n")
    # Other templates (Jinja interpreter goldens).
    with open(os.path.join(args.out, "jinja_templates.jsonl"), "w", encoding="utf-8") as f:
        for tname, template in JINJA_TEMPLATES + [("deepseek_r1_from_v3", r1_from_v3(at.chat_template))]:
            comp = _compile_jinja_template(template)
            cases = []
            for name, msgs, gen in CHATS:
                if tname == "r1_style" and any(m["role"] == "tool" for m in msgs):
                    continue
                for tools in ([None, TOOLS] if tname in ("chatml_tools", "llama_style") else [None]):
                    # transformers drops None-valued keys before rendering (see above); the
                    # DeepSeek-style template needs them (tool-call branch), as vLLM passes them.
                    if tname == "deepseek_r1_from_v3":
                        norm = msgs
                    else:
                        norm = [{k: v for k, v in m.items() if v is not None} for m in msgs]
                    try:
                        text = comp.render(messages=norm, tools=tools, documents=None, add_generation_prompt=gen,
                                           bos_token=at.bos_token, eos_token=at.eos_token)
                    except Exception as e:  # a conversation the template rejects: the error is the golden
                        text = None
                    cases.append({"conversation": name, "messages": norm, "tools": tools,
                                  "add_generation_prompt": gen, "text": text})
            f.write(json.dumps({"name": tname, "template": template, "cases": cases}, ensure_ascii=False) + "\n")
    print("jinja_templates.jsonl: %d templates" % (len(JINJA_TEMPLATES) + 1))
    print("chat_template.jsonl: %d conversations (transformers %s)" % (len(CHATS), transformers.__version__))


if __name__ == "__main__":
    main()
